//! Criterion benchmarks of the Rust core (release build, opt-in):
//!
//!     cargo bench --bench engine
//!
//! One plan (prefill + 255 decode steps, summed exactly) inside Rust, and the
//! plans-per-second of the grid sweep on 1 and 2 threads for a dense 8B model
//! and an MoE model.

use _core::collectives::ProtocolTable;
use _core::model::{Activation, Attention, Ffn, LayerGroup, NormKind};
use _core::plan::{Efficiency, Plan};
use _core::sweep::{grid, Axes};
use _core::{estimate, Device, Model};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn proto() -> ProtocolTable {
    ProtocolTable {
        beta_ll: 0.40,
        beta_ll128: 0.65,
        beta_simple: 0.85,
        ll_max_bytes: 65536.0,
        ll128_max_bytes: 1048576.0,
    }
}

fn h100() -> Device {
    serde_json::from_str(
        r#"{"name":"H100_SXM","tflops_bf16":989.4,"tflops_fp16":989.4,"tflops_fp8":1978.9,"tflops_fp32":66.9,
            "memory_gb":80,"memory_bw_gbs":3350,"scaleup_bw_gbs":900,"host_link_bw_gbs":126}"#,
    )
    .unwrap()
}

fn model(moe: bool) -> Model {
    let ffn = if moe {
        Ffn::Moe {
            num_experts: 8,
            top_k: 2,
            expert_intermediate_size: 14336,
            shared_intermediate_size: 0,
            gated: true,
            activation: Activation::Silu,
            bias: false,
            router_bias: false,
        }
    } else {
        Ffn::Dense {
            intermediate_size: 14336,
            gated: true,
            activation: Activation::Silu,
            bias: false,
        }
    };
    Model {
        name: if moe { "mixtral-8x7b" } else { "llama-3.1-8b" }.into(),
        hidden_size: 4096,
        vocab_size: if moe { 32000 } else { 128256 },
        layer_groups: vec![LayerGroup {
            count: 32,
            attention: Some(Attention {
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                window: None,
                qkv_bias: false,
                o_bias: false,
                qk_norm: false,
                rotary: true,
                sinks: false,
                mla: None,
            }),
            mamba: None,
            ffn,
            norms: 2,
        }],
        norm: NormKind::Rms,
        tie_word_embeddings: false,
        position_embeddings: 0,
        lm_head_bias: false,
        max_model_len: 131072,
    }
}

fn bench(c: &mut Criterion) {
    let eff = Efficiency::uncalibrated();
    let dev = h100();
    let dense = model(false);
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
    };
    let n = axes.len();
    let mut g = c.benchmark_group("sweep");
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    for (label, m) in [("dense-8b", model(false)), ("moe-8x7b", model(true))] {
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
