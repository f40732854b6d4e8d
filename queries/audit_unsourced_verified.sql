-- question: which rows claim verified = true without a source?
-- must_pass: true
SELECT name, vendor, source
FROM hardware
WHERE verified AND (source IS NULL OR trim(source) = '')
ORDER BY name;
