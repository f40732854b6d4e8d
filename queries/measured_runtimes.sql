-- question: which runtimes have measured model rows? (the names `--runtime` accepts from
-- data/benchmarks, beside the GEMM paths and the calibration's runtimes; a row of a backend
-- ridgeline has no runtime for names none)
SELECT DISTINCT runtime
FROM benchmarks
WHERE model IS NOT NULL AND runtime IS NOT NULL
ORDER BY runtime;
