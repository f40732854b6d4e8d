-- question: what does the engine need to know about one device (by canonical name)?
SELECT h.name, h.vendor, h.arch, h.kind, h.verified,
       h.tflops_bf16, h.tflops_fp16, h.tflops_fp16_acc16, h.tflops_fp8, h.tflops_int8,
       h.tflops_tf32, h.tflops_fp32, h.memory_gb, h.memory_bw_gbs, h.memory_type,
       h.scaleup_bw_gbs, h.scaleup_latency_us, h.scaleup_domain, h.host_link,
       l.bw_gbs AS host_link_bw_gbs, h.tdp_w, h.idle_w, h.source
FROM hardware h LEFT JOIN host_links l USING (host_link)
ORDER BY h.name;
