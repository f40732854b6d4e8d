-- question: does every memory configuration (hardware_memory) name a catalog device, and is
-- the size its row holds one of the sizes listed for it, the largest (the row is the part at
-- its largest memory; a name stating a smaller one selects that configuration)?
-- must_pass: true
WITH per AS (
    SELECT m.name, h.name AS row_name, h.memory_gb AS row_gb, max(m.memory_gb) AS largest,
           bool_or(m.memory_gb = h.memory_gb) AS lists_row
    FROM hardware_memory m
    LEFT JOIN hardware h ON h.name = m.name
    GROUP BY m.name, h.name, h.memory_gb
)
SELECT name, 'no catalog row of that name' AS problem FROM per WHERE row_name IS NULL
UNION ALL
SELECT name, 'the row''s memory_gb is not among its listed sizes' FROM per WHERE row_name IS NOT NULL AND NOT lists_row
UNION ALL
SELECT name, 'a listed size is larger than the row''s memory_gb' FROM per WHERE row_name IS NOT NULL AND largest > row_gb
ORDER BY name;
