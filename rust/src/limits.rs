//! The bounds every input is checked against: representation limits (what an f64 holds
//! exactly) and work bounds (what one call may build), each with why. Below every other module.

/// The largest integer every f64 holds exactly (2^53): token, device and step counts stay
/// below it so that no count the engine forms rounds or wraps. A representation limit.
pub const MAX_EXACT: u64 = 1 << 53;

/// Distinct shapes one estimate builds and prices: prefill steps (each a pass over the model's
/// operators, about a microsecond) and, per attention window, runs of decode contexts with one
/// closed form. A work bound that keeps one call within seconds, not a physical limit: real
/// plans take a handful (a chunk dividing the prompt: prompt / chunk steps; KV padded to 256
/// cells: output / 256 runs).
pub const MAX_SHAPES: u64 = 1 << 20;

/// Layers a model may have: the normaliser and the builder do work per layer group and the
/// pipeline per stage, so this bounds one estimate's work; 512 times the deepest published
/// decoders (about 128 layers). A work bound, not a physical limit.
pub const MAX_LAYERS: u64 = 1 << 16;

/// Routed experts a MoE layer may have: skewed routing sums over each expert; over 100 times
/// the largest published expert counts (about 384). A work bound, not a physical limit.
pub const MAX_EXPERTS: u64 = 1 << 16;

/// Draft tokens one speculative step may propose: a step builds one drafter pass per draft
/// token, so this bounds one estimate's work; 16 times the 64-token trees SGLang verifies
/// (`--speculative-num-draft-tokens 64`). A work bound, not a physical limit.
pub const MAX_DRAFT_TOKENS: u64 = 1 << 10;
