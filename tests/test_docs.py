"""The README and docs/ say what the code does: every command shown runs, an output shown after a
command is what it prints, the CLI reference is generated from the commands, and the README fits
on a screen."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
#: Shown commands the CI runs itself (.ci/run installs the package and runs the test suites).
CI_ITSELF = ("pip install", "cargo test", "python -m pytest")


def _blocks(doc: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text())]


def _commands(text: str) -> list[str]:
    """The ridgeline commands of a bash block (a line may chain an install with ``&&``)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        for part in (p.strip() for p in line.split("&&")):
            if part.startswith(CI_ITSELF):
                continue
            assert part.startswith("ridgeline "), f"a shown command the docs test cannot run: {part!r}"
            out.append(part)
    return out


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name(argv[0])
    return subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, cwd=cwd, env=os.environ.copy())


@pytest.mark.parametrize("doc", [d for d in DOCS if _blocks(d)], ids=lambda d: d.name)
def test_every_command_shown_runs_and_prints_what_is_shown(doc, tmp_path):
    blocks = _blocks(doc)
    for lang, text in blocks:  # files a page shows are written first (# scenario.yaml: ...)
        m = re.match(r"# (\S+\.ya?ml)\b", text)
        if lang == "yaml" and m:
            (tmp_path / m.group(1).rstrip(":")).write_text(text)
    ran = 0
    for i, (lang, text) in enumerate(blocks):
        if lang == "python":
            r = _run(["python", "-c", text], tmp_path)
            assert r.returncode == 0, f"{doc.name}: python block {i}: {r.stderr[-2000:]}"
            ran += 1
        if lang != "bash":
            continue
        commands = _commands(text)
        for cmd in commands:
            r = _run(shlex.split(cmd), tmp_path)
            assert r.returncode == 0, f"{doc.name}: `{cmd}` exited {r.returncode}: {r.stderr[-2000:]}"
            ran += 1
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        if nxt is not None and nxt[0] == "text" and len(commands) == 1:
            assert r.stdout.rstrip("\n") == nxt[1].rstrip("\n"), f"{doc.name}: `{commands[0]}` prints otherwise"
    assert ran


def test_the_cli_reference_is_generated_from_the_commands():
    from ridgeline.cli.reference import reference

    assert (REPO / "docs" / "cli.md").read_text() == reference(), "run: python -m ridgeline.cli.reference > docs/cli.md"
    # every command is in it, the plot ones included
    for cmd in ("ridgeline estimate", "ridgeline plot roofline", "ridgeline plot compare", "ridgeline catalog sql"):
        assert f"## `{cmd}`" in reference()


def test_the_readme_fits_on_a_screen_and_links_every_doc():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 120
    first = next(b for lang, b in _blocks(REPO / "README.md") if lang == "bash").splitlines()
    assert first[0] == "pip install . && ridgeline estimate --model meta-llama/Llama-3.1-8B --hardware H100_SXM"
    assert first[1].startswith('pip install ".[test]"') and "python -m pytest" in first[1]
    links = set(re.findall(r"\]\(([^)#]+)\)", readme))
    assert {f"docs/{d.name}" for d in DOCS[1:]} <= links
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links {target}, which does not exist"


def test_the_cookbook_answers_ten_questions_each_with_a_command():
    text = (REPO / "docs" / "cookbook.md").read_text()
    questions = re.findall(r"^\*\*(\d+)\. (.+?)\*\*", text, re.M | re.S)
    assert [int(n) for n, _ in questions] == list(range(1, 11))
    # each question is followed by its one command, before the next question
    parts = re.split(r"^\*\*\d+\. ", text, flags=re.M)[1:]
    assert all(len(_commands(b)) == 1 for p in parts for lang, b in [BLOCK.search(p).groups()] if lang == "bash")
    assert all(BLOCK.search(p) for p in parts)
