-- question: which runtimes have measured model rows? (the names `--runtime` accepts from
-- data/benchmarks, beside the GEMM paths and the calibration's runtimes)
SELECT DISTINCT runtime
FROM benchmarks
WHERE model IS NOT NULL
ORDER BY runtime;
