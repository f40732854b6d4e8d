//! Pricing one scheduler step on the engine's graph, fast enough for millions of steps.
//!
//! A step holds decodes (one token each at its own context) and prefill chunks (new tokens on
//! top of cached ones). Every operator but the attention kernels depends only on the step's
//! tokens, sampling sequences and sequences (`graph::StepShape`): that part is built and priced
//! once per shape and cached. The attention kernels are affine in the attended pairs and keys
//! (`graph::Op`: FLOPs f0 + f1 k, bytes b0 + b1 k), so a decode batch's kernel is priced at its
//! sequences' mean keys read, exactly as one operator over all of them, and a prefill chunk's
//! from its segment. A decode-only step is priced from exactly the operators `engine::decode`
//! prices (so a lone request's TPOT is the static estimate's); a prefill or mixed step from
//! exactly the operators `engine::prefill` prices for the same segments, the decodes it carries
//! run through the decode form of attention (MLA's absorbed kernels).

use crate::attention::DecodeKeys;
use crate::engine::{
    decode_ops, draft_decode_ops, draft_layer_passes, draft_segment_kernels, draft_segment_ops, Layout,
};
use crate::graph::{build_kernels, build_step, step_shape, Geometry, Op, OpKind, Segment, StepShape};
use crate::plan::{Efficiency, Plan};
use crate::roofline::{price, Cost};
use std::collections::HashMap;
use std::ops::{Add, AddAssign};

/// A step's seconds, and the seconds of it its operators spend at the compute and at the memory
/// roof (what the power model's busy fractions are made of: `power::utilisation`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepCost {
    pub time_s: f64,
    pub compute_s: f64,
    pub memory_s: f64,
}

impl From<Cost> for StepCost {
    fn from(c: Cost) -> StepCost {
        StepCost {
            time_s: c.time_s,
            compute_s: c.compute_s,
            memory_s: c.memory_s,
        }
    }
}

impl Add for StepCost {
    type Output = StepCost;
    fn add(self, o: StepCost) -> StepCost {
        StepCost {
            time_s: self.time_s + o.time_s,
            compute_s: self.compute_s + o.compute_s,
            memory_s: self.memory_s + o.memory_s,
        }
    }
}

impl std::ops::Sub for StepCost {
    type Output = StepCost;
    fn sub(self, o: StepCost) -> StepCost {
        StepCost {
            time_s: self.time_s - o.time_s,
            compute_s: self.compute_s - o.compute_s,
            memory_s: self.memory_s - o.memory_s,
        }
    }
}

impl AddAssign for StepCost {
    fn add_assign(&mut self, o: StepCost) {
        *self = *self + o;
    }
}

impl std::iter::Sum for StepCost {
    fn sum<I: Iterator<Item = StepCost>>(it: I) -> StepCost {
        it.fold(StepCost::default(), Add::add)
    }
}

/// A step's cost in the parts an instance composes: what depends only on the step's tokens
/// (`fixed`, overhead included) and of that the routed experts (which serve every attention-DP
/// rank's tokens), the attention kernels (which depend on each sequence's context), and the sends
/// between pipeline stages (with PP); with the step's tokens and whether it holds a prompt chunk.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepParts {
    pub fixed: StepCost,
    pub experts: StepCost,
    pub kernels: StepCost,
    pub sends: StepCost,
    pub tokens: u64,
    pub prefill: bool,
}

/// A step shape's operators that do not move with the contexts: all of them, and the routed
/// experts' share.
#[derive(Clone, Copy, Debug, Default)]
struct Fixed {
    all: StepCost,
    experts: StepCost,
    /// The pipeline's sends between stages (with PP).
    sends: StepCost,
}

/// A decode batch's operators, split for pricing.
struct DecodeForm {
    /// Every operator whose cost does not move with the contexts, summed (decode-only steps).
    fixed: StepCost,
    /// The routed experts' share of `fixed`.
    experts: StepCost,
    /// The pipeline's sends between stages (with PP).
    sends: StepCost,
    /// The decode form's own attention-side GEMMs (MLA's absorb/unabsorb), summed: what a
    /// mixed step adds for its decodes besides the attention kernels.
    absorb: StepCost,
    /// The attention kernels (cost affine in the keys read): with speculation, the drafter's
    /// too, over all its passes.
    kernels: Vec<Op>,
    /// A speculating drafter's passes of one token after its first (their operators that do not
    /// move with the contexts): what a step holding prompt chunks adds for its decodes, whose
    /// first drafter pass runs over the step's segments.
    draft_later: StepCost,
}

/// Prices steps of one layout and plan under one set of efficiencies.
pub struct StepPricer<'a> {
    layout: Layout<'a>,
    plan: Plan,
    eff: Efficiency,
    bw: f64,
    /// Per-step overhead: layers x t_layer + t_step (as the engine charges every step).
    overhead: StepCost,
    decode: Vec<Option<DecodeForm>>,
    shapes: HashMap<StepShape, Fixed>,
    /// A speculating drafter's first pass over a step's segments, its operators that do not move
    /// with them, by step shape (`draft_shape_cost`).
    draft_shapes: HashMap<StepShape, StepCost>,
    /// Whether a speculating drafter runs on the device (its passes are priced).
    drafter: bool,
    /// The routed experts of a step of so many tokens (`experts_at`).
    expert_steps: HashMap<u64, StepCost>,
    scratch: Vec<Op>,
    keys: Vec<(DecodeKeys, f64)>,
    pub shapes_built: u64,
}

impl<'a> StepPricer<'a> {
    pub fn new(layout: Layout<'a>, plan: &Plan, eff: &Efficiency, bw: f64) -> StepPricer<'a> {
        // a speculating drafter's layers run k passes a step, each paying the per-layer overhead
        let draft_layers = draft_layer_passes(&layout, plan);
        let layers = layout.ctx().model.num_layers() as f64 + draft_layers;
        StepPricer {
            layout,
            plan: plan.clone(),
            eff: *eff,
            bw,
            overhead: StepCost {
                time_s: layers * eff.t_layer_s + eff.t_step_s,
                ..StepCost::default()
            },
            decode: Vec::new(),
            shapes: HashMap::new(),
            draft_shapes: HashMap::new(),
            drafter: draft_layers > 0.0,
            expert_steps: HashMap::new(),
            scratch: Vec::with_capacity(16),
            keys: Vec::with_capacity(4),
            shapes_built: 0,
        }
    }

    pub fn layout(&self) -> &Layout<'a> {
        &self.layout
    }

    /// The largest activation workspace a step of `tokens` prompt tokens holds (the runtime's
    /// profiling pass at its token budget).
    pub fn workspace_bytes(&self, tokens: u64) -> f64 {
        let seg = [Segment {
            count: 1,
            new: tokens,
            prefix: 0,
            sampled: 1,
        }];
        let mut ops = Vec::with_capacity(64);
        build_step(self.layout.ctx(), &Geometry::Segments(&seg), &mut ops);
        ops.iter().map(|o| o.act_bytes).fold(0.0, f64::max)
    }

    fn form(&mut self, batch: u64) -> &DecodeForm {
        let i = batch as usize;
        if self.decode.len() <= i {
            self.decode.resize_with(i + 1, || None);
        }
        if self.decode[i].is_none() {
            let mut ops = decode_ops(&self.layout, &self.plan, batch);
            ops.extend(draft_decode_ops(&self.layout, &self.plan, batch, true));
            let draft_later = draft_decode_ops(&self.layout, &self.plan, batch, false)
                .iter()
                .filter(|op| !op.kind.reads_context())
                .map(|op| StepCost::from(price(op, 0.0, self.bw, &self.eff)))
                .sum();
            let (mut fixed, mut absorb, mut experts) = (StepCost::default(), StepCost::default(), StepCost::default());
            let mut sends = StepCost::default();
            let mut kernels = Vec::new();
            for op in ops {
                if op.kind.reads_context() {
                    kernels.push(op);
                    continue;
                }
                let c = StepCost::from(price(&op, 0.0, self.bw, &self.eff));
                fixed += c;
                if op.routed {
                    experts += c;
                }
                if op.kind == OpKind::PpSend {
                    sends += c;
                }
                if matches!(op.kind, OpKind::QAbsorb | OpKind::VUnabsorb) {
                    absorb += c;
                }
            }
            self.decode[i] = Some(DecodeForm {
                fixed,
                experts,
                sends,
                absorb,
                kernels,
                draft_later,
            });
            self.shapes_built += 1;
        }
        self.decode[i].as_ref().expect("built above")
    }

    /// The attention kernels of `contexts.len()` decodes, each at its context (tokens in the
    /// cache with its new one): every kernel priced at the batch's mean keys read.
    fn decode_kernels(&mut self, contexts: &[u64]) -> StepCost {
        let batch = contexts.len() as u64;
        self.form(batch);
        let (bw, eff) = (self.bw, self.eff);
        let form = self.decode[batch as usize].as_ref().expect("built above");
        self.keys.clear();
        let mut total = StepCost::default();
        for op in &form.kernels {
            let k = match self.keys.iter().find(|(d, _)| *d == op.keys) {
                Some((_, k)) => *k,
                None => {
                    let sum: u64 = contexts.iter().map(|&l| op.keys.keys(l)).sum();
                    let k = sum as f64 / batch as f64;
                    self.keys.push((op.keys, k));
                    k
                }
            };
            total += price(op, k, bw, &eff).into();
        }
        total
    }

    /// A step of decodes only, at `contexts` (each >= 1), overhead included.
    pub fn decode_step(&mut self, contexts: &[u64]) -> StepCost {
        let p = self.decode_parts(contexts);
        p.fixed + p.kernels
    }

    /// A step with prefill chunks `prefill` (non-empty) and decodes at `contexts`, overhead
    /// included. `segs` is scratch space the caller keeps (cleared here).
    pub fn mixed_step(&mut self, prefill: &[Segment], contexts: &[u64], segs: &mut Vec<Segment>) -> StepCost {
        let p = self.mixed_parts(prefill, contexts, segs);
        p.fixed + p.kernels
    }

    /// The operators of the step of `segs` that do not move with the segments' contexts.
    fn shape_cost(&mut self, segs: &[Segment]) -> Fixed {
        let shape = step_shape(segs);
        if let Some(&s) = self.shapes.get(&shape) {
            return s;
        }
        let mut ops = Vec::with_capacity(64);
        build_step(self.layout.ctx(), &Geometry::Segments(segs), &mut ops);
        let mut s = Fixed::default();
        for o in ops.iter().filter(|o| !o.kind.varies_with_segments()) {
            let c = StepCost::from(price(o, 0.0, self.bw, &self.eff));
            s.all += c;
            if o.routed {
                s.experts += c;
            }
            if o.kind == OpKind::PpSend {
                s.sends += c;
            }
        }
        self.shapes.insert(shape, s);
        self.shapes_built += 1;
        s
    }

    /// The routed experts of a step of `tokens` prompt tokens on this layout: under attention DP
    /// they serve `attention_dp` x `tokens` tokens (every rank's share of a step's tokens).
    pub fn experts_at(&mut self, tokens: u64) -> StepCost {
        if let Some(&c) = self.expert_steps.get(&tokens) {
            return c;
        }
        let seg = [Segment {
            count: 1,
            new: tokens,
            prefix: 0,
            sampled: 0,
        }];
        let c = self.shape_cost(&seg).experts;
        self.expert_steps.insert(tokens, c);
        c
    }

    /// A speculating drafter's first pass over the step of `segs`: its operators that do not move
    /// with the segments (priced once per step shape, as `shape_cost` prices the target's), and
    /// its kernels over the prompt chunks `prefill` (the decodes' are in their decode form).
    /// Nothing without a drafter on the device.
    fn draft_cost(&mut self, segs: &[Segment], prefill: &[Segment]) -> StepCost {
        if !self.drafter {
            return StepCost::default();
        }
        let shape = step_shape(segs);
        let fixed = match self.draft_shapes.get(&shape) {
            Some(&c) => c,
            None => {
                draft_segment_ops(&self.layout, &self.plan, segs, &mut self.scratch);
                let c = self
                    .scratch
                    .iter()
                    .filter(|o| !o.kind.varies_with_segments())
                    .map(|o| StepCost::from(price(o, 0.0, self.bw, &self.eff)))
                    .sum();
                self.draft_shapes.insert(shape, c);
                c
            }
        };
        draft_segment_kernels(&self.layout, &self.plan, prefill, &mut self.scratch);
        let kernels: StepCost = self
            .scratch
            .iter()
            .map(|o| StepCost::from(price(o, 0.0, self.bw, &self.eff)))
            .sum();
        fixed + kernels
    }

    /// `decode_step` in the parts of `StepParts`.
    pub fn decode_parts(&mut self, contexts: &[u64]) -> StepParts {
        let form = self.form(contexts.len() as u64);
        let (fixed, experts, sends) = (form.fixed, form.experts, form.sends);
        StepParts {
            fixed: fixed + self.overhead,
            experts,
            kernels: self.decode_kernels(contexts),
            sends,
            tokens: contexts.len() as u64,
            prefill: false,
        }
    }

    /// `mixed_step` in the parts of `StepParts`.
    pub fn mixed_parts(&mut self, prefill: &[Segment], contexts: &[u64], segs: &mut Vec<Segment>) -> StepParts {
        // the shape counts every token: a decode is one new token that samples (a speculating
        // one verifies its k drafts beside it, scoring each of its k + 1 positions)
        segs.clear();
        segs.extend_from_slice(prefill);
        if !contexts.is_empty() {
            let q = self.plan.speculation.as_ref().map_or(1, |s| s.draft_tokens + 1);
            segs.push(Segment {
                count: contexts.len() as u64,
                new: q,
                prefix: 0,
                sampled: q,
            });
        }
        let shape = self.shape_cost(segs);
        build_kernels(self.layout.ctx(), prefill, &mut self.scratch);
        let kernels: StepCost = self
            .scratch
            .iter()
            .map(|o| StepCost::from(price(o, 0.0, self.bw, &self.eff)))
            .sum();
        let decodes = if contexts.is_empty() {
            StepCost::default()
        } else {
            let kernels = self.decode_kernels(contexts);
            let form = self.form(contexts.len() as u64);
            form.absorb + form.draft_later + kernels
        };
        // a speculating drafter's first pass runs over the step's segments
        let draft = self.draft_cost(segs, prefill);
        StepParts {
            fixed: shape.all + draft + self.overhead,
            experts: shape.experts,
            kernels: kernels + decodes,
            sends: shape.sends,
            tokens: segs.iter().map(|s| s.count * s.new).sum(),
            prefill: true,
        }
    }
}
