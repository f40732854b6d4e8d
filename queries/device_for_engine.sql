-- question: what does the engine need to know about each device? The vendor row,
-- the host link's rate, measured link latencies where the vendor gives none, and
-- the device's measured collectives: its own fits, or where it has none the median
-- of the measured devices of the same vendor and fabric (links_source says which).
WITH dev AS (
    SELECT h.*, l.bw_gbs AS host_link_bw_gbs,
           CASE WHEN h.scaleup_bw_gbs IS NOT NULL THEN 'scaleup'
                WHEN l.bw_gbs IS NOT NULL THEN 'host_link' END AS link_fabric
    FROM hardware h LEFT JOIN host_links l USING (host_link)
),
own AS (
    SELECT name,
           list({'library': library, 'op': op, 'ranks': ranks, 'floor_us': floor_us,
                 'latency_us': latency_us, 'bw_efficiency': bw_efficiency}
                ORDER BY library, op, ranks) AS links
    FROM link_collectives GROUP BY name
),
measured AS (
    SELECT c.*, h.vendor FROM link_collectives c JOIN hardware h USING (name)
),
pooled AS (
    SELECT vendor, fabric, library, op, ranks,
           median(floor_us) AS floor_us, median(latency_us) AS latency_us,
           median(bw_efficiency) AS bw_efficiency,
           string_agg(DISTINCT name, ', ' ORDER BY name) AS peers
    FROM measured GROUP BY vendor, fabric, library, op, ranks
),
pooled_list AS (
    SELECT vendor, fabric,
           list({'library': library, 'op': op, 'ranks': ranks, 'floor_us': floor_us,
                 'latency_us': latency_us, 'bw_efficiency': bw_efficiency}
                ORDER BY library, op, ranks) AS links,
           max(peers) AS peers
    FROM pooled GROUP BY vendor, fabric
)
SELECT d.name, d.vendor, d.arch, d.family, d.kind, d.verified,
       d.tflops_bf16, d.tflops_fp16, d.tflops_fp16_acc16, d.tflops_fp8, d.tflops_fp4, d.tflops_int8,
       d.tflops_tf32, d.tflops_fp32, d.memory_gb, d.memory_bw_gbs, d.memory_type,
       d.scaleup_bw_gbs,
       coalesce(d.scaleup_latency_us, up.latency_us) AS scaleup_latency_us,
       CASE WHEN d.scaleup_latency_us IS NOT NULL THEN d.source ELSE up.source END AS scaleup_latency_source,
       d.scaleup_domain, d.scaleout_bw_gbs,
       coalesce(d.scaleout_latency_us, out.latency_us) AS scaleout_latency_us,
       d.host_link, d.host_link_bw_gbs, d.tdp_w, d.idle_w, d.source,
       coalesce(own.links, p.links, []) AS links,
       CASE WHEN own.links IS NOT NULL
                THEN 'measured on this device (data/hardware/link_collectives.csv)'
            WHEN p.links IS NOT NULL
                THEN 'no measurement of this device: median of the measured ' || d.vendor || ' '
                     || d.link_fabric || ' devices (' || p.peers || ')'
       END AS links_source
FROM dev d
LEFT JOIN link_measurements up ON up.name = d.name AND up.fabric = 'scaleup'
LEFT JOIN link_measurements out ON out.name = d.name AND out.fabric = 'scaleout'
LEFT JOIN own ON own.name = d.name
LEFT JOIN pooled_list p ON p.vendor = d.vendor AND p.fabric = d.link_fabric
ORDER BY d.name;
