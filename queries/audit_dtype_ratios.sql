-- question: which rows have a bf16/fp32 or fp8/bf16 ratio outside what their
-- architecture allows (a sparse figure, FP8 stored as bf16, FP32 stored as bf16),
-- or an architecture the ratio table does not know?
-- must_pass: true
SELECT h.name, h.arch,
       coalesce(h.tflops_bf16, h.tflops_fp16) / h.tflops_fp32 AS bf16_per_fp32,
       h.tflops_fp8 / coalesce(h.tflops_bf16, h.tflops_fp16)  AS fp8_per_bf16,
       CASE WHEN r.arch IS NULL THEN 'architecture missing from arch_ratios'
            ELSE 'ratio outside the architecture band' END AS problem
FROM hardware h
LEFT JOIN arch_ratios r USING (arch)
WHERE r.arch IS NULL
   OR (coalesce(h.tflops_bf16, h.tflops_fp16) / h.tflops_fp32
        NOT BETWEEN coalesce(r.bf16_per_fp32_min, 0) AND coalesce(r.bf16_per_fp32_max, 1e9))
   OR (coalesce(h.tflops_bf16, h.tflops_fp16) / h.tflops_fp32 IS NOT NULL AND r.bf16_per_fp32_min IS NULL)
   OR (h.tflops_fp8 / coalesce(h.tflops_bf16, h.tflops_fp16)
        NOT BETWEEN coalesce(r.fp8_per_bf16_min, 0) AND coalesce(r.fp8_per_bf16_max, 1e9))
   OR (h.tflops_fp8 / coalesce(h.tflops_bf16, h.tflops_fp16) IS NOT NULL AND r.fp8_per_bf16_min IS NULL)
ORDER BY h.name;
