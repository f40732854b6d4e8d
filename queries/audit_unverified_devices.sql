-- question: which devices are not vendor-reconciled (their estimates carry estimated: true)?
-- must_pass: false
SELECT name, vendor, arch, substr(source, 1, 120) AS source
FROM hardware
WHERE NOT verified
ORDER BY vendor, name;
