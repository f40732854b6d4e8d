-- question: which operator and link rows report more than the catalog allows (more than 5% above
-- the dense peak of their dtype, or above the device's memory or link bandwidth)? Each is a data
-- or catalog error to fix, never a tolerance to widen.
-- must_pass: true
SELECT b.id, b.hardware, b.metric, b.dtype, b.value,
       CASE b.dtype WHEN 'bf16' THEN h.tflops_bf16 WHEN 'fp16' THEN coalesce(h.tflops_fp16, h.tflops_bf16)
                    WHEN 'fp8' THEN h.tflops_fp8 END AS catalog_peak
FROM benchmarks b JOIN hardware h ON h.name = b.hardware
WHERE b.not_priced IS NULL AND b.metric = 'gemm_tflops'
  AND b.value > 1.05 * CASE b.dtype WHEN 'bf16' THEN h.tflops_bf16
                                    WHEN 'fp16' THEN coalesce(h.tflops_fp16, h.tflops_bf16)
                                    WHEN 'fp8' THEN h.tflops_fp8 END
UNION ALL
SELECT b.id, b.hardware, b.metric, b.dtype, b.value, h.memory_bw_gbs
FROM benchmarks b JOIN hardware h ON h.name = b.hardware
WHERE b.not_priced IS NULL AND b.metric = 'copy_gbs' AND b.value > 1.05 * h.memory_bw_gbs
ORDER BY 1;
