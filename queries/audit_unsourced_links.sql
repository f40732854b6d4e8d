-- question: which devices name a host link the host_links table cannot price?
-- must_pass: true
SELECT h.name, h.host_link
FROM hardware h LEFT JOIN host_links l USING (host_link)
WHERE h.host_link IS NOT NULL AND h.host_link <> 'unified' AND l.host_link IS NULL
ORDER BY h.name;
