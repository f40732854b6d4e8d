-- question: does a later generation in a family have a lower per-chip dense peak
-- than an earlier one (a sign of a per-board, per-die or sparse figure)? Binned parts
-- (hardware_bins) are lower configurations of a generation and take no part.
-- must_pass: true
WITH peak AS (
    SELECT name, family, year, coalesce(tflops_bf16, tflops_fp16, tflops_fp32) AS tflops
    FROM hardware
    WHERE name NOT IN (SELECT name FROM hardware_bins)
)
SELECT later.name, later.year, later.tflops, earlier.name AS earlier, earlier.year AS earlier_year,
       earlier.tflops AS earlier_tflops
FROM peak later JOIN peak earlier
  ON later.family = earlier.family AND later.year > earlier.year
WHERE later.tflops < earlier.tflops
ORDER BY later.family, later.name;
