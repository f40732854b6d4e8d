//! The builder that appends a step's operators, one method a block of a layer (attention,
//! MLA, the recurrent mixers, the FFN and its experts, norms, the collectives between them).

use super::*;
use crate::attention::DecodeKeys;
use crate::collectives::Collective;
use crate::model::{Attention, Ffn, LayerGroup, Mla, NormKind, Recurrent};
use crate::weights::Role;

pub(super) struct Builder<'a, 'b> {
    pub(super) ctx: &'b BuildCtx<'a>,
    pub(super) out: &'b mut Vec<Op>,
    pub(super) group: u16,
    pub(super) repeat: f64,
}

impl Builder<'_, '_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(&mut self, kind: OpKind, peak: f64, f: (f64, f64), b: (f64, f64), act: f64, keys: DecodeKeys) {
        self.out
            .push(Op::compute(kind, self.group, self.repeat, peak, f, b, act, keys));
    }

    /// GEMM [m x k] x [k x n] whose n columns are made of parts stored in
    /// different roles (fused q/k/v): 2mnk FLOPs; bytes = `weight_sets` copies
    /// of the weights (bias in the activation dtype) + input + output.
    pub(super) fn gemm_parts(
        &mut self,
        kind: OpKind,
        m: f64,
        k: f64,
        parts: &[(f64, Role)],
        weight_sets: f64,
        bias: bool,
    ) {
        let c = self.ctx;
        let n: f64 = parts.iter().map(|p| p.0).sum();
        let act = (m * k + m * n) * c.act_b;
        let mut w: f64 = parts.iter().map(|(np, r)| c.format(*r).bytes(k, *np)).sum();
        if bias {
            w += n * c.act_b;
        }
        let peak = c.peak(parts[0].1);
        self.push(
            kind,
            peak,
            (2.0 * m * n * k, 0.0),
            (weight_sets * w + act, 0.0),
            act,
            NO_KEYS,
        );
        if let Some(op) = self.out.last_mut() {
            op.quantized = c.format(parts[0].1).bits < 16.0;
            op.role = Some(parts[0].1);
        }
        // a GEMM on a quantised compute path (dynamic W8A8 / W4A4) first quantises its input
        // in a kernel of its own: the m x k activations read, and written at `act_bits`
        let f = c.format(parts[0].1);
        if let (Some(bits), Some(_)) = (f.act_bits, f.compute) {
            if peak > c.peak_act {
                let bytes = m * k * (c.act_b + bits / 8.0);
                let quant = if kind.varies_with_segments() {
                    OpKind::KvUpActQuant
                } else {
                    OpKind::ActQuant
                };
                self.push(quant, c.peak_act, (0.0, 0.0), (bytes, 0.0), bytes, NO_KEYS);
            }
        }
    }

    pub(super) fn gemm(&mut self, kind: OpKind, m: f64, k: f64, n: f64, role: Role, bias: bool) {
        self.gemm_parts(kind, m, k, &[(n, role)], 1.0, bias);
    }

    /// A GEMM whose weights stay in the activation dtype (router, MLA latent norms' neighbours).
    pub(super) fn gemm_act(&mut self, kind: OpKind, m: f64, k: f64, n: f64, bias: bool) {
        let c = self.ctx;
        let act = (m * k + m * n) * c.act_b;
        let w = (k * n + if bias { n } else { 0.0 }) * c.act_b;
        self.push(kind, c.peak_act, (2.0 * m * n * k, 0.0), (w + act, 0.0), act, NO_KEYS);
    }

    /// Elementwise op over `elems` outputs, reading `read_per` inputs per output.
    pub(super) fn elementwise(&mut self, kind: OpKind, elems: f64, flops_per: f64, read_per: f64, weight_bytes: f64) {
        let c = self.ctx;
        let act = elems * (read_per + 1.0) * c.act_b;
        self.push(
            kind,
            c.peak_act,
            (elems * flops_per, 0.0),
            (act + weight_bytes, 0.0),
            act,
            NO_KEYS,
        );
    }

    pub(super) fn comm(&mut self, kind: OpKind, op: Collective, ranks: u64, msg: f64) {
        let s = self.ctx.comm(op, ranks, msg);
        let peak = self.ctx.peak_act;
        self.out
            .push(Op::comm(kind, self.group, self.repeat, 1.0, peak, msg, s));
    }

    /// `count` norms, each over `rows` x `width` elements with its own weights.
    pub(super) fn norm(&mut self, kind: OpKind, count: f64, rows: f64, width: f64) {
        self.norm_of(self.ctx.model.norm, kind, count, rows, width);
    }

    /// `count` norms of kind `norm` (the model's, or one its family fixes: the indexer's
    /// LayerNorm), each over `rows` x `width` elements with its own weights.
    pub(super) fn norm_of(&mut self, norm: NormKind, kind: OpKind, count: f64, rows: f64, width: f64) {
        let w = count * width * norm.params(1) as f64 * self.ctx.act_b;
        self.elementwise(kind, count * rows * width, norm.flops_per_element(), 1.0, w);
    }

    /// A recurrent mixer (Gated DeltaNet or Mamba2) on `t` tokens, heads split over the TP
    /// ranks: the input projection, the short convolution (reading and writing each sequence's
    /// conv state), the scan over the recurrent state, the gated norm and the output projection.
    pub(super) fn recurrent(&mut self, r: &Recurrent, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        self.gemm(OpKind::LinearInProj, t, d, r.in_cols, Role::Q, r.bias);
        // depthwise causal conv: a multiply-add per tap, then SiLU (3); the conv state of each
        // sequence (its last kernel - 1 inputs) read and written
        let state = geo.sequences() * r.conv_ch * (r.kernel - 1.0) * 2.0 * c.act_b;
        let act = t * r.conv_ch * 2.0 * c.act_b + state;
        self.push(
            OpKind::ShortConv,
            c.peak_act,
            (t * r.conv_ch * (2.0 * r.kernel + 3.0), 0.0),
            (act + r.conv_ch * r.kernel * c.act_b, 0.0),
            act,
            NO_KEYS,
        );
        self.linear_kernel(r, geo, t);
        // RMSNorm of the output, times SiLU(z): norm + silu (3) + multiply (1)
        let flops = NormKind::Rms.flops_per_element() + 4.0;
        self.elementwise(OpKind::GatedNorm, t * r.out_in, flops, 2.0, r.out_in * c.act_b);
        self.gemm(OpKind::LinearOutProj, t, r.out_in, d, Role::O, r.bias);
        if c.tp > 1 {
            self.comm(OpKind::AttnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }

    /// The scan of one recurrent layer group (spec 30, linear attention): each sequence's new
    /// tokens in chunks (`Recurrent::chunk`, else the plan's `linear_chunk`; the last one
    /// shorter), every chunk costing `chunked_scan_flops` per head; a decode token is a chunk of
    /// one. Bytes: the scan's inputs and outputs, and each sequence's state read and written
    /// once (in the state dtype).
    pub(super) fn linear_kernel(&mut self, r: &Recurrent, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let chunk = if r.chunk > 0 { r.chunk as f64 } else { c.linear_chunk };
        let per_seq = |new: u64| chunked_scan_flops(r.scan, new, chunk, r.heads, r.dk, r.dv);
        let flops = match geo {
            Geometry::Segments(s) => s.iter().map(|x| x.count as f64 * per_seq(x.new)).sum(),
            Geometry::Decode { batch, queries, .. } => *batch as f64 * per_seq(*queries),
        };
        let io = t * r.io * c.act_b;
        // read once and written once a sequence; a speculative verification of q tokens writes
        // the state after each of them (vLLM's GDN keeps num_spec + 1 state slots a request,
        // `spec_state_indices_tensor`, to roll back to the last accepted token)
        let writes = match geo {
            Geometry::Decode { queries, .. } => *queries as f64,
            Geometry::Segments(_) => 1.0,
        };
        let state = geo.sequences() * (1.0 + writes) * r.heads * r.dk * r.dv * r.state_bytes.unwrap_or(c.act_b);
        self.push(
            OpKind::LinearAttention,
            c.peak_act,
            (flops, 0.0),
            (io + state, 0.0),
            io,
            NO_KEYS,
        );
    }

    /// A feed-forward block from width `d` (the hidden size, or a latent MoE's width): up
    /// (gate+up when gated) to width `ft` per rank, activation, down; on `m` token rows, reading
    /// `weight_sets` copies of its weights (1 for dense, the expected distinct experts when routed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mlp(
        &mut self,
        kinds: [OpKind; 3],
        roles: [Role; 2],
        m: f64,
        (d, ft): (f64, f64),
        gated: bool,
        act_flops: f64,
        bias: bool,
        weight_sets: f64,
    ) {
        let up = if gated { 2.0 * ft } else { ft };
        self.gemm_parts(kinds[0], m, d, &[(up, roles[0])], weight_sets, bias);
        self.elementwise(kinds[1], m * ft, act_flops, if gated { 2.0 } else { 1.0 }, 0.0);
        self.gemm_parts(kinds[2], m, ft, &[(d, roles[1])], weight_sets, bias);
    }

    /// `t` tokens' cache entries of `values_per_token` values written (read in the activation
    /// dtype, stored in the KV dtype): the KV cache, or the indexer's key cache.
    pub(super) fn cache_write(&mut self, kind: OpKind, t: f64, values_per_token: f64) {
        let c = self.ctx;
        let elems = t * values_per_token;
        self.push(
            kind,
            c.peak_act,
            (0.0, 0.0),
            (elems * (c.act_b + c.kv_b), 0.0),
            elems * c.act_b,
            NO_KEYS,
        );
    }

    pub(super) fn attention(&mut self, a: &Attention, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let h_t = (a.heads / c.tp) as f64;
        match &a.mla {
            None => self.attention_mha(a, geo, t, h_t),
            Some(m) => self.attention_mla(a, m, geo, t, h_t),
        }
        let o_in = h_t * a.mla.as_ref().map_or(a.v_dim(), |m| m.v_head_dim) as f64;
        if a.output_gate {
            // o * sigmoid(gate): exp, add, divide, multiply per element; reads o and the gate
            self.elementwise(OpKind::AttnGate, t * o_in, 4.0, 2.0, 0.0);
        }
        self.gemm(OpKind::OutProj, t, o_in, d, Role::O, a.o_bias);
        if c.tp > 1 {
            self.comm(OpKind::AttnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }

    pub(super) fn attention_mha(&mut self, a: &Attention, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (hd, vd) = (a.head_dim as f64, a.v_dim() as f64);
        let kv_t = a.kv_heads.div_ceil(c.tp) as f64;
        // an output gate on the attention output: q_proj emits it beside the query
        let q_cols = if a.output_gate { h_t * (hd + vd) } else { h_t * hd };
        let parts = [(q_cols, Role::Q), (kv_t * hd, Role::K), (kv_t * vd, Role::V)];
        let d_in = a.input(c.model.hidden_size) as f64;
        self.gemm_parts(OpKind::QkvProj, t, d_in, &parts, 1.0, a.qkv_bias);
        if a.qk_norm {
            self.norm(OpKind::QkNorm, 1.0, t * (h_t + kv_t), hd);
        }
        if a.rotary {
            // x cos + rotate(x) sin: 2 multiplies and 1 add per element.
            self.elementwise(OpKind::Rotary, t * (h_t + kv_t) * hd, 3.0, 1.0, 0.0);
        }
        self.cache_write(OpKind::KvCacheWrite, t, kv_t * (hd + vd));
        self.mha_kernel(a, geo, t, h_t);
    }

    /// The attention kernel of a (GQA/MQA) layer group: the one operator of a prefill step whose
    /// cost depends on where its tokens sit in their sequences, not only on how many there are.
    pub(super) fn mha_kernel(&mut self, a: &Attention, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (hd, vd) = (a.head_dim as f64, a.v_dim() as f64);
        let kv_t = a.kv_heads.div_ceil(c.tp) as f64;
        // Fused: QK^T and PV over the exact pairs; reads Q, the attended K and V rows
        // (in the KV dtype), writes O; no score matrix in memory. Unfused: both products
        // over the full rectangle, and each score written and read back through memory.
        // A prefill query of a sliding-window layer is computed against its whole cache ring
        // up to itself (`BuildCtx::swa_span`).
        let span = c.swa_span(a.window);
        let (p0, p1, k0, k1) = match a.chunk {
            Some(ch) => geo.attention_chunked(ch),
            None => geo.attention(span),
        };
        // QK^T over the key width and PV over the value width, 2 FLOPs a multiply-add each
        let per_pair = 2.0 * h_t * (hd + vd);
        let per_key = kv_t * (hd + vd) * c.kv_b;
        let qo = t * h_t * (hd + vd) * c.act_b;
        let (flops, scores) = if c.attention_score_bytes > 0.0 {
            let (r0, r1) = geo.score_rectangle(span, a.chunk);
            let per_score = h_t * c.attention_score_bytes;
            ((per_pair * r0, per_pair * r1), (per_score * r0, per_score * r1))
        } else {
            ((per_pair * p0, per_pair * p1), (0.0, 0.0))
        };
        // A decode step reads the cells the runtime's cache layout gives (`DecodeKeys`: a
        // sliding-window ring larger than the window, n_kv padding, a chunk).
        let keys = match geo {
            Geometry::Decode { batch, .. } => c.decode_keys(a.window, *batch).with_chunk(a.chunk),
            Geometry::Segments(_) => DecodeKeys::exact(span).with_chunk(a.chunk),
        };
        self.push(
            OpKind::Attention,
            c.peak_act,
            flops,
            (qo + per_key * k0 + scores.0, per_key * k1 + scores.1),
            qo,
            keys,
        );
        if c.attention_score_bytes == 0.0 {
            if let Some(op) = self.out.last_mut() {
                op.attention = Some(match geo {
                    Geometry::Decode { .. } => AttnPhase::Decode,
                    Geometry::Segments(_) => AttnPhase::Prefill,
                });
                op.items = geo.sequences() * kv_t;
            }
        }
    }

    /// One per-head product between the latent (`kvl` wide) and a `per_head`-wide slice of
    /// kv_b_proj (stored kvl x heads*per_head) for t tokens: MLA's absorbed decode matrices.
    pub(super) fn latent_head_gemm(&mut self, kind: OpKind, t: f64, h_t: f64, kvl: f64, per_head: f64) {
        let c = self.ctx;
        let w = c.format(Role::V).bytes(kvl, h_t * per_head);
        let act = t * h_t * (per_head + kvl) * c.act_b;
        self.push(
            kind,
            c.peak(Role::V),
            (2.0 * t * h_t * per_head * kvl, 0.0),
            (w + act, 0.0),
            act,
            NO_KEYS,
        );
        if let Some(op) = self.out.last_mut() {
            op.quantized = c.format(Role::V).bits < 16.0;
            op.role = Some(Role::V);
        }
    }

    /// Multi-head latent attention. The cache holds the latent (kv_lora) and
    /// the shared rope key; decode attends over the latent with the up
    /// projections absorbed, prefill expands keys and values per head.
    pub(super) fn attention_mla(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let (nope, rope, _, kvl) = m.dims();
        let qk = nope + rope;
        match m.q_lora_rank {
            Some(r) => {
                let r = r as f64;
                self.gemm(OpKind::QLoraProj, t, d, r, Role::Q, false);
                self.norm(OpKind::LatentNorm, 1.0, t, r);
                self.gemm(OpKind::QkvProj, t, r, h_t * qk, Role::Q, false);
            }
            None => self.gemm(OpKind::QkvProj, t, d, h_t * qk, Role::Q, false),
        }
        self.gemm(OpKind::KvLoraProj, t, d, kvl + rope, Role::K, false);
        self.norm(OpKind::LatentNorm, 1.0, t, kvl);
        if a.rotary {
            self.elementwise(OpKind::Rotary, t * (h_t + 1.0) * rope, 3.0, 1.0, 0.0);
        }
        self.cache_write(OpKind::KvCacheWrite, t, kvl + rope);
        if let (Some(ix), Some(r)) = (a.indexer.as_ref().filter(|i| !i.shared), m.q_lora_rank) {
            self.indexer(ix, r, t);
            self.indexer_scores(ix, geo, t);
        }
        // DeepSeek sparse attention attends its top-k keys in the absorbed (MQA) form in
        // prefill too (gathered latent rows cannot be expanded per head ahead of the kernel).
        match geo {
            Geometry::Decode { .. } => self.mla_absorbed(a, m, geo, t, h_t),
            Geometry::Segments(_) if a.indexer.is_some() => self.mla_absorbed(a, m, geo, t, h_t),
            Geometry::Segments(_) => self.mla_expanded_kernel(a, m, geo, t, h_t),
        }
    }

    /// MLA with the up-projections absorbed: queries into latent space, MQA over the cached
    /// latent and rope key, values back out of latent space.
    pub(super) fn mla_absorbed(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let (nope, _, v, kvl) = m.dims();
        // q_nope x W_UK per head -> a query in latent space.
        self.latent_head_gemm(OpKind::QAbsorb, t, h_t, kvl, nope);
        self.mla_absorbed_kernel(a, m, geo, t, h_t);
        // Latent output x W_UV per head -> values.
        self.latent_head_gemm(OpKind::VUnabsorb, t, h_t, kvl, v);
    }

    /// The absorbed MLA kernel: scores over latent + rope key, values over the latent (MQA on
    /// the cache), over the keys each query attends (its window or indexer top-k).
    pub(super) fn mla_absorbed_kernel(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (_, rope, _, kvl) = m.dims();
        let span = c.swa_span(a.attended());
        let per_pair = 2.0 * h_t * (2.0 * kvl + rope);
        let per_key = (kvl + rope) * c.kv_b;
        let qo = t * h_t * (kvl + rope + kvl) * c.act_b;
        let keys = match geo {
            Geometry::Decode { batch, .. } => c.decode_keys(a.attended(), *batch),
            Geometry::Segments(_) => DecodeKeys::exact(span),
        };
        self.latent_attention(per_pair, per_key, qo, geo.attention(span), keys);
    }

    /// The lightning indexer's projections and key-cache write (replicated on every TP rank:
    /// all ranks select the same keys). `q_lora`: the MLA query latent it reads.
    pub(super) fn indexer(&mut self, ix: &crate::model::Indexer, q_lora: u64, t: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let [(qk, qn), (kk, kn), (wk, wn)] = ix.matrices(c.model.hidden_size, q_lora);
        debug_assert_eq!((kk as f64, wk as f64), (d, d));
        // wq_b on the query latent, then wk and weights_proj on the hidden state (one GEMM on d)
        self.gemm(OpKind::IndexerProj, t, qk as f64, qn as f64, Role::Q, false);
        self.gemm_parts(
            OpKind::IndexerProj,
            t,
            d,
            &[(kn as f64, Role::K), (wn as f64, Role::K)],
            1.0,
            false,
        );
        let hd = ix.head_dim as f64;
        self.norm_of(NormKind::Layer, OpKind::LatentNorm, 1.0, t, hd);
        self.cache_write(OpKind::IndexerCacheWrite, t, hd);
    }

    /// The indexer scoring every earlier key for each query: per pair and head, a dot product
    /// over head_dim (2 head_dim FLOPs), its ReLU and weight (2); reads each key (head_dim values
    /// in the KV dtype) once per sequence. Every key, whatever the top-k.
    pub(super) fn indexer_scores(&mut self, ix: &crate::model::Indexer, geo: &Geometry, t: f64) {
        let c = self.ctx;
        let (h, hd) = (ix.heads as f64, ix.head_dim as f64);
        let (p0, p1, k0, k1) = geo.attention(None);
        let per_pair = h * (2.0 * hd + 2.0);
        let per_key = hd * c.kv_b;
        let q = t * h * hd * c.act_b;
        let keys = match geo {
            Geometry::Decode { batch, .. } => c.decode_keys(None, *batch),
            Geometry::Segments(_) => NO_KEYS,
        };
        self.push(
            OpKind::IndexerScores,
            c.peak_act,
            (per_pair * p0, per_pair * p1),
            (q + per_key * k0, per_key * k1),
            q,
            keys,
        );
    }

    /// MLA's prefill kernels, expanded: every attended key's latent up-projected to per-head
    /// K_nope and V, then attention over them; like `mha_kernel`, their cost depends on where the
    /// step's tokens sit in their sequences.
    pub(super) fn mla_expanded_kernel(&mut self, a: &Attention, m: &Mla, geo: &Geometry, t: f64, h_t: f64) {
        let c = self.ctx;
        let (nope, rope, v, kvl) = m.dims();
        let qk = nope + rope;
        let span = c.swa_span(a.window);
        let (p0, p1, k0, k1) = geo.attention(span);
        // Up-project every attended key's latent to per-head K_nope and V.
        self.gemm(OpKind::KvUpProj, k0, kvl, h_t * (nope + v), Role::V, false);
        let per_pair = 2.0 * h_t * (qk + v);
        let per_key = h_t * (qk + v) * c.act_b;
        let qo = t * h_t * (qk + v) * c.act_b;
        self.latent_attention(per_pair, per_key, qo, (p0, p1, k0, k1), DecodeKeys::exact(span));
    }

    /// MLA's attention kernel: `per_pair` FLOPs per attended pair, `per_key` bytes per key read
    /// and `qo` bytes of queries and outputs, over the (pairs0, pairs1, keys0, keys1) of
    /// `Geometry::attention`.
    pub(super) fn latent_attention(
        &mut self,
        per_pair: f64,
        per_key: f64,
        qo: f64,
        a: (f64, f64, f64, f64),
        keys: DecodeKeys,
    ) {
        let (p0, p1, k0, k1) = a;
        let peak = self.ctx.peak_act;
        let flops = (per_pair * p0, per_pair * p1);
        self.push(
            OpKind::Attention,
            peak,
            flops,
            (qo + per_key * k0, per_key * k1),
            qo,
            keys,
        );
    }

    pub(super) fn ffn(&mut self, g: &LayerGroup, t: f64, route_tokens: f64) {
        let c = self.ctx;
        let d = c.model.hidden_size as f64;
        let tpf = c.tp as f64;
        match &g.ffn {
            Ffn::None => return,
            Ffn::Dense {
                intermediate_size,
                gated,
                activation,
                bias,
            } => {
                let af = activation.flops_per_element(*gated);
                let ft = *intermediate_size as f64 / tpf;
                self.mlp(
                    [OpKind::FfnUp, OpKind::FfnAct, OpKind::FfnDown],
                    [Role::Up, Role::Down],
                    t,
                    (d, ft),
                    *gated,
                    af,
                    *bias,
                    1.0,
                );
            }
            Ffn::Moe {
                num_experts,
                top_k,
                expert_intermediate_size,
                shared_intermediate_size,
                gated,
                activation,
                bias,
                router_bias,
                shared_gate,
                latent,
            } => {
                let e = *num_experts as f64;
                let k = *top_k as f64;
                let af = activation.flops_per_element(*gated);
                // Router: a replicated GEMM to E logits (and the shared expert's gate logit),
                // weights in the activation dtype.
                let gate = if *shared_gate { 1.0 } else { 0.0 };
                self.gemm_act(OpKind::Router, t, d, e + gate, *router_bias);
                let fe = *expert_intermediate_size as f64;
                // Expert parallelism over the MoE group (tp x attention_dp ranks): E/ep whole
                // experts per device, each sharded over the MoE TP (group / ep ranks; ep = 1 is
                // plain TP, ep = group whole experts). Without attention DP every rank holds all
                // t tokens after the attention all-reduce, so each runs its own experts on the
                // tokens routed to them (t k / ep token-rows in expectation) with no all-to-all,
                // and the FFN all-reduce below sums the ranks' outputs: vLLM's FusedMoE
                // all-reduces its output when EP spans the TP group and uses dispatch/combine
                // all-to-all kernels only with data-parallel attention (vllm/model_executor/
                // layers/fused_moe: FusedMoENaivePrepareAndFinalize "for DP+EP without all2all
                // kernels"); TensorRT-LLM likewise (moe_tp_size x moe_ep_size = tp_size x
                // attention_dp_size). With attention DP the experts serve every group's tokens
                // (adp t), and each rank dispatches its t / tp share of its group's tokens to
                // the experts they route to and gets the results back: two all-to-alls of
                // (t / tp) k d elements over the ep ranks.
                let (epf, moe_tp) = c.expert_split();
                let adp = c.attention_dp.max(1) as f64;
                let routed = distinct_experts(*num_experts, *top_k, route_tokens * adp, c.routing_skew);
                // a latent MoE projects its tokens down before the experts (and dispatches them
                // in the latent width) and back up after
                let width = latent.map_or(d, |l| l as f64);
                if latent.is_some() {
                    self.gemm(OpKind::MoeLatentProj, t, d, width, Role::Up, false);
                }
                let first_expert_op = self.out.len();
                let msg = t / tpf * k * width * c.act_b;
                if c.attention_dp > 1 && c.ep > 1 {
                    self.comm(OpKind::ExpertDispatch, Collective::AllToAll, c.ep, msg);
                }
                self.mlp(
                    [OpKind::ExpertUp, OpKind::ExpertAct, OpKind::ExpertDown],
                    [Role::ExpertUp, Role::ExpertDown],
                    adp * t * k / epf,
                    (width, fe / moe_tp),
                    *gated,
                    af,
                    *bias,
                    routed / epf,
                );
                if c.attention_dp > 1 && c.ep > 1 {
                    self.comm(OpKind::ExpertDispatch, Collective::AllToAll, c.ep, msg);
                }
                let grouped = t > 1.0;
                for op in &mut self.out[first_expert_op..] {
                    op.grouped = grouped && op.kind.is_routed_expert();
                    op.routed = !op.kind.is_comm();
                }
                if latent.is_some() {
                    self.gemm(OpKind::MoeLatentProj, t, width, d, Role::Down, false);
                }
                if *shared_intermediate_size > 0 {
                    self.mlp(
                        [
                            OpKind::SharedExpertUp,
                            OpKind::SharedExpertAct,
                            OpKind::SharedExpertDown,
                        ],
                        [Role::Up, Role::Down],
                        t,
                        (d, *shared_intermediate_size as f64 / tpf),
                        *gated,
                        af,
                        *bias,
                        1.0,
                    );
                }
            }
        }
        if c.tp > 1 {
            self.comm(OpKind::FfnAllReduce, Collective::AllReduce, c.tp, t * d * c.act_b);
        }
    }
}
