//! Criterion benchmarks of the Rust core (release build, opt-in):
//!
//!     cargo bench --bench engine --features fixtures
//!
//! One plan (prefill + 255 decode steps, summed exactly) inside Rust, and the
//! plans-per-second of the grid sweep on 1 and 2 threads for a dense 8B model
//! and an MoE model.

use _core::estimate;
use _core::fixtures::{h100, llama31_8b, mixtral_8x7b, nccl_protocol as proto};
use _core::plan::{Efficiency, Plan};
use _core::sweep::{grid, Axes};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let eff = Efficiency::uncalibrated();
    let dev = h100();
    let dense = llama31_8b();
    let plan = Plan::new(1, 1024, 256, 0.9);
    c.bench_function("one plan in Rust (llama-3.1-8b, 1024 + 256)", |b| {
        b.iter(|| estimate(black_box(&dense), &dev, black_box(&plan), &eff, proto(), false).unwrap())
    });
    // Fixed shapes: prefill of 1024 and 256 output tokens; the grid varies batch and TP.
    let axes = Axes {
        tp: vec![1, 2, 4, 8],
        pp: vec![1],
        ep: vec![1],
        dp: vec![1],
        chunk: vec![0],
        batch: (1..=256).collect(),
        prompt: vec![1024],
        output: vec![256],
        chunk_extra: None,
    };
    let n = axes.len();
    let mut g = c.benchmark_group("sweep");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    for (label, m) in [("dense-8b", llama31_8b()), ("moe-8x7b", mixtral_8x7b())] {
        for threads in [1usize, 2] {
            g.bench_with_input(BenchmarkId::new(label, threads), &threads, |b, &t| {
                b.iter(|| grid(&m, &dev, &axes, &plan, &eff, proto(), t, 0, n))
            });
        }
    }
    g.finish();
}

/// One scheduler step priced by the serving simulator's pricer (shapes already built, as in a
/// run): a decode step of 64 sequences at spread contexts, and a mixed step (a 2,048-token prefill
/// chunk on a 4,096-token prefix beside 64 decodes).
fn bench_step(c: &mut Criterion) {
    use _core::engine::Layout;
    use _core::graph::Segment;
    use _core::serving::step::StepPricer;
    let eff = Efficiency::uncalibrated();
    let dev = h100();
    let m = llama31_8b();
    let plan = Plan::new(1, 1, 1, 0.9);
    let layout = Layout::new(&m, &dev, &plan, proto()).unwrap();
    let mut p = StepPricer::new(layout, &plan, &eff, dev.memory_bw());
    let contexts: Vec<u64> = (0..64).map(|i| 1000 + 37 * i).collect();
    let prefill = [Segment {
        count: 1,
        new: 2048,
        prefix: 4096,
        samples: false,
    }];
    let mut segs = Vec::new();
    p.decode_step(&contexts);
    p.mixed_step(&prefill, &contexts, &mut segs);
    c.bench_function("serving step: decode of 64 (llama-3.1-8b)", |b| {
        b.iter(|| p.decode_step(black_box(&contexts)))
    });
    c.bench_function("serving step: 2048-token chunk + 64 decodes", |b| {
        b.iter(|| p.mixed_step(black_box(&prefill), black_box(&contexts), &mut segs))
    });
}

criterion_group!(benches, bench, bench_step);
criterion_main!(benches);
