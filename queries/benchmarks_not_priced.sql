-- question: which measured rows are kept out of fitting and validation, and why?
-- must_pass: false
SELECT not_priced AS reason, file, count(*) AS rows, min(id) AS example
FROM benchmarks
WHERE not_priced IS NOT NULL
GROUP BY ALL
ORDER BY rows DESC, reason;
