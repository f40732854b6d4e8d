-- question: does every binned part carry exactly its parent's figures scaled by its
-- GPU core count (compute) and its parent's memory bandwidth scaled by the memory bus it
-- keeps (the whole bus unless the bin names both widths), and name a real parent?
-- must_pass: true
WITH pairs AS (
    SELECT b.name, b.parent, b.gpu_cores::DOUBLE / b.parent_gpu_cores AS ratio,
           coalesce(b.memory_bus_bits::DOUBLE / b.parent_memory_bus_bits, 1.0) AS bus,
           h.tflops_fp32, h.tflops_fp16, h.tflops_bf16, h.memory_bw_gbs, h.vendor, h.arch, p.name AS parent_row,
           p.tflops_fp32 AS p_fp32, p.tflops_fp16 AS p_fp16, p.tflops_bf16 AS p_bf16,
           p.memory_bw_gbs AS p_bw, p.vendor AS p_vendor, p.arch AS p_arch
    FROM hardware_bins b
    LEFT JOIN hardware h ON h.name = b.name
    LEFT JOIN hardware p ON p.name = b.parent
)
SELECT name, parent, 'no catalog row for the bin or its parent' AS problem FROM pairs
WHERE memory_bw_gbs IS NULL OR parent_row IS NULL
UNION ALL
SELECT name, parent, 'compute is not the parent''s scaled by the core ratio' FROM pairs
WHERE abs(tflops_fp32 - p_fp32 * ratio) > 1e-3 * p_fp32
   OR abs(tflops_fp16 - p_fp16 * ratio) > 1e-3 * p_fp16
   OR abs(tflops_bf16 - p_bf16 * ratio) > 1e-3 * p_bf16
   OR (tflops_fp32 IS NULL) <> (p_fp32 IS NULL)
UNION ALL
SELECT name, parent, 'memory bandwidth is not the parent''s scaled by the bus it keeps, or vendor or architecture differs' FROM pairs
WHERE abs(memory_bw_gbs - p_bw * bus) > 1e-3 * p_bw OR vendor <> p_vendor OR arch <> p_arch
ORDER BY 1;
