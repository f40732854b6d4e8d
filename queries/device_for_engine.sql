-- question: what does the engine need to know about each device? The vendor row,
-- the host link's rate, and measured link latencies where the vendor gives none.
SELECT h.name, h.vendor, h.arch, h.kind, h.verified,
       h.tflops_bf16, h.tflops_fp16, h.tflops_fp16_acc16, h.tflops_fp8, h.tflops_int8,
       h.tflops_tf32, h.tflops_fp32, h.memory_gb, h.memory_bw_gbs, h.memory_type,
       h.scaleup_bw_gbs,
       coalesce(h.scaleup_latency_us, up.latency_us) AS scaleup_latency_us,
       CASE WHEN h.scaleup_latency_us IS NOT NULL THEN h.source ELSE up.source END AS scaleup_latency_source,
       h.scaleup_domain, h.scaleout_bw_gbs,
       coalesce(h.scaleout_latency_us, out.latency_us) AS scaleout_latency_us,
       h.host_link, l.bw_gbs AS host_link_bw_gbs, h.tdp_w, h.idle_w, h.source
FROM hardware h
LEFT JOIN host_links l USING (host_link)
LEFT JOIN link_measurements up ON up.name = h.name AND up.fabric = 'scaleup'
LEFT JOIN link_measurements out ON out.name = h.name AND out.fabric = 'scaleout'
ORDER BY h.name;
