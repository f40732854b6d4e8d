//! Criterion benchmarks of the Rust core (release build, opt-in):
//!
//!     cargo bench --bench engine
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

criterion_group!(benches, bench);
criterion_main!(benches);
