-- question: which engine-wide constants have no source?
-- must_pass: true
SELECT name, value, unit
FROM constants
WHERE source IS NULL OR trim(source) = ''
ORDER BY name;
