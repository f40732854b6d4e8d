-- question: is one physical device listed twice with different specs? Catches names
-- that collide once case and punctuation are ignored, aliases that shadow another
-- device's canonical name, and rows with the same vendor, architecture, memory size
-- and bandwidth, year and board power but different compute figures (binned parts of
-- one die, listed in hardware_bins, are expected to differ in compute only).
-- must_pass: true
WITH keyed AS (
    SELECT *, regexp_replace(lower(name), '[^a-z0-9]', '', 'g') AS key FROM hardware
)
SELECT a.name, b.name AS other, 'names collide' AS problem
FROM keyed a JOIN keyed b ON a.key = b.key AND a.name < b.name
UNION ALL
SELECT al.alias, al.name, 'alias shadows another device name'
FROM hardware_alias al JOIN hardware h ON h.name = al.alias AND h.name <> al.name
UNION ALL
SELECT al.alias, al.name, 'alias points at no device'
FROM hardware_alias al LEFT JOIN hardware h ON h.name = al.name
WHERE h.name IS NULL
UNION ALL
SELECT a.name, b.name, 'same memory system, different compute figures'
FROM hardware a JOIN hardware b
  ON a.vendor = b.vendor AND a.arch = b.arch AND a.memory_gb = b.memory_gb
 AND a.memory_bw_gbs = b.memory_bw_gbs AND a.year IS NOT DISTINCT FROM b.year
 AND a.tdp_w IS NOT DISTINCT FROM b.tdp_w AND a.name < b.name
WHERE a.tflops_bf16 IS DISTINCT FROM b.tflops_bf16
   OR a.tflops_fp8 IS DISTINCT FROM b.tflops_fp8
   OR a.tflops_fp4 IS DISTINCT FROM b.tflops_fp4
   OR a.tflops_fp32 IS DISTINCT FROM b.tflops_fp32
EXCEPT
SELECT least(a, b), greatest(a, b), 'same memory system, different compute figures'
FROM (SELECT name AS a, parent AS b FROM hardware_bins
      UNION ALL
      SELECT x.name, y.name FROM hardware_bins x JOIN hardware_bins y ON x.parent = y.parent)
ORDER BY 1;
