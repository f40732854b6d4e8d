-- The catalog database, built from the text files under data/ (spec 10).
-- Constraints fire on every insert, for the shipped rows and for a user's own.

CREATE TABLE hardware (
    name                VARCHAR PRIMARY KEY CHECK (regexp_full_match(name, '[A-Z0-9_]+')),
    vendor              VARCHAR NOT NULL,
    arch                VARCHAR NOT NULL,
    family              VARCHAR NOT NULL,
    kind                VARCHAR NOT NULL CHECK (kind IN ('gpu', 'tpu', 'npu', 'cpu', 'apple_soc')),
    year                INTEGER CHECK (year BETWEEN 2000 AND 2100),
    tflops_bf16         DOUBLE CHECK (isfinite(tflops_bf16) AND tflops_bf16 > 0),
    tflops_fp16         DOUBLE CHECK (isfinite(tflops_fp16) AND tflops_fp16 > 0),
    tflops_fp16_acc16   DOUBLE CHECK (isfinite(tflops_fp16_acc16) AND tflops_fp16_acc16 > 0),
    tflops_fp8          DOUBLE CHECK (isfinite(tflops_fp8) AND tflops_fp8 > 0),
    -- dense FP4 (NVFP4 / MXFP4 elements, E2M1) tensor rate where the device has an FP4 path
    tflops_fp4          DOUBLE CHECK (isfinite(tflops_fp4) AND tflops_fp4 > 0),
    tflops_int8         DOUBLE CHECK (isfinite(tflops_int8) AND tflops_int8 > 0),
    tflops_tf32         DOUBLE CHECK (isfinite(tflops_tf32) AND tflops_tf32 > 0),
    tflops_fp32         DOUBLE CHECK (isfinite(tflops_fp32) AND tflops_fp32 > 0),
    -- capacity as vendors quote it, in binary GB (GiB, JEDEC JESD100B.01): an "80GB" H100 holds 80 x 2^30 bytes
    memory_gb           DOUBLE NOT NULL CHECK (isfinite(memory_gb) AND memory_gb > 0),
    memory_bw_gbs       DOUBLE NOT NULL CHECK (isfinite(memory_bw_gbs) AND memory_bw_gbs > 0),
    memory_type         VARCHAR,
    scaleup_bw_gbs      DOUBLE CHECK (isfinite(scaleup_bw_gbs) AND scaleup_bw_gbs > 0),
    scaleup_latency_us  DOUBLE CHECK (isfinite(scaleup_latency_us) AND scaleup_latency_us >= 0),
    scaleup_domain      INTEGER CHECK (scaleup_domain >= 1),
    scaleout_bw_gbs     DOUBLE CHECK (isfinite(scaleout_bw_gbs) AND scaleout_bw_gbs > 0),
    scaleout_latency_us DOUBLE CHECK (isfinite(scaleout_latency_us) AND scaleout_latency_us >= 0),
    host_link           VARCHAR,
    tdp_w               DOUBLE CHECK (isfinite(tdp_w) AND tdp_w > 0),
    idle_w              DOUBLE CHECK (isfinite(idle_w) AND idle_w >= 0),
    compute_capability  VARCHAR,
    verified            BOOLEAN NOT NULL,
    source              VARCHAR,
    notes               VARCHAR,
    CHECK (coalesce(tflops_bf16, tflops_fp16, tflops_fp8, tflops_int8, tflops_tf32, tflops_fp32) IS NOT NULL),
    CHECK (idle_w IS NULL OR tdp_w IS NULL OR idle_w < tdp_w)
);

CREATE TABLE hardware_alias (
    alias VARCHAR PRIMARY KEY CHECK (regexp_full_match(alias, '[A-Z0-9_]+')),
    name  VARCHAR NOT NULL
);

CREATE TABLE host_links (
    host_link VARCHAR PRIMARY KEY,
    bw_gbs    DOUBLE NOT NULL CHECK (isfinite(bw_gbs) AND bw_gbs > 0),
    source    VARCHAR NOT NULL
);

-- Measured link latencies (per hop), kept apart from the vendor rows of `hardware`.
CREATE TABLE link_measurements (
    name       VARCHAR NOT NULL,
    fabric     VARCHAR NOT NULL CHECK (fabric IN ('scaleup', 'scaleout')),
    latency_us DOUBLE NOT NULL CHECK (isfinite(latency_us) AND latency_us >= 0),
    source     VARCHAR NOT NULL,
    PRIMARY KEY (name, fabric)
);

-- Measured collectives on one device's own link (scale-up fabric, or the host link where it has
-- none), fitted by `ridgeline calibrate --comm` to the runtimes' kernel tables: per collective
-- library, collective and rank count, the per-call floor, the per-hop latency and the share of
-- the protocol rate (catalog link x NCCL beta table) reached.
CREATE TABLE link_collectives (
    name          VARCHAR NOT NULL,
    fabric        VARCHAR NOT NULL CHECK (fabric IN ('scaleup', 'host_link')),
    library       VARCHAR NOT NULL,
    version       VARCHAR NOT NULL,
    op            VARCHAR NOT NULL CHECK (op IN ('all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all')),
    ranks         INTEGER NOT NULL CHECK (ranks >= 2),
    floor_us      DOUBLE NOT NULL CHECK (isfinite(floor_us) AND floor_us >= 0),
    latency_us    DOUBLE NOT NULL CHECK (isfinite(latency_us) AND latency_us >= 0),
    bw_efficiency DOUBLE NOT NULL CHECK (isfinite(bw_efficiency) AND bw_efficiency > 0),
    n_rows        INTEGER NOT NULL CHECK (n_rows > 0),
    within_1_5x   DOUBLE NOT NULL CHECK (within_1_5x BETWEEN 0 AND 1),
    source        VARCHAR NOT NULL,
    PRIMARY KEY (name, library, op, ranks)
);

-- Binned parts: the same die with GPU cores fused off. Their compute is the parent's
-- scaled by the core count and their bandwidth the parent's scaled by the memory bus
-- they keep (audit_bin_derivations checks both).
CREATE TABLE hardware_bins (
    name             VARCHAR PRIMARY KEY,
    parent           VARCHAR NOT NULL,
    gpu_cores        INTEGER NOT NULL CHECK (gpu_cores > 0),
    parent_gpu_cores INTEGER NOT NULL CHECK (parent_gpu_cores > gpu_cores),
    -- a bin that also fuses off memory controllers names both bus widths; its bandwidth is
    -- the parent's scaled by them (NULL: the parent's memory interface)
    memory_bus_bits        INTEGER CHECK (memory_bus_bits > 0),
    parent_memory_bus_bits INTEGER CHECK (parent_memory_bus_bits >= memory_bus_bits),
    source           VARCHAR NOT NULL,
    CHECK ((memory_bus_bits IS NULL) = (parent_memory_bus_bits IS NULL))
);

-- The memory sizes a part is sold with, where its catalog row holds one of several (a Mac's
-- unified memory: the row holds the largest): a name stating another size selects that
-- configuration (the row with memory_gb replaced) or is refused with these sizes.
CREATE TABLE hardware_memory (
    name      VARCHAR NOT NULL,
    memory_gb DOUBLE NOT NULL CHECK (isfinite(memory_gb) AND memory_gb > 0),
    source    VARCHAR NOT NULL,
    PRIMARY KEY (name, memory_gb)
);

CREATE TABLE arch_ratios (
    arch              VARCHAR PRIMARY KEY,
    bf16_per_fp32_min DOUBLE CHECK (isfinite(bf16_per_fp32_min)),
    bf16_per_fp32_max DOUBLE CHECK (isfinite(bf16_per_fp32_max)),
    fp8_per_bf16_min  DOUBLE CHECK (isfinite(fp8_per_bf16_min)),
    fp8_per_bf16_max  DOUBLE CHECK (isfinite(fp8_per_bf16_max)),
    source            VARCHAR NOT NULL
);

CREATE TABLE hardware_sources (
    name   VARCHAR NOT NULL,
    "column" VARCHAR NOT NULL,
    source VARCHAR NOT NULL
);

-- Prices of renting a device (spec 60): one row an offer, per device-hour as the offer states it
-- (an instance's price over its devices), with its date and source. No row: cost is missing.
CREATE TABLE hardware_cost (
    name                VARCHAR NOT NULL,
    provider            VARCHAR NOT NULL,
    sku                 VARCHAR NOT NULL,
    tier                VARCHAR NOT NULL CHECK (tier IN ('on-demand', 'spot', 'reserved-1y', 'reserved-3y')),
    devices_per_sku     INTEGER NOT NULL CHECK (devices_per_sku >= 1),
    usd_per_device_hour DOUBLE NOT NULL CHECK (isfinite(usd_per_device_hour) AND usd_per_device_hour > 0),
    region              VARCHAR,
    as_of               DATE NOT NULL,
    source              VARCHAR NOT NULL
);

-- Published purchase prices (one device; a system with one accelerator is priced as that
-- device), amortised over the years a user sets (``--amortise-years``) into a price per hour.
CREATE TABLE hardware_purchase (
    name           VARCHAR NOT NULL,
    vendor         VARCHAR NOT NULL,
    kind           VARCHAR NOT NULL CHECK (kind IN ('list price', 'launch list price', 'street price', 'analyst estimate')),
    usd_per_device DOUBLE NOT NULL CHECK (isfinite(usd_per_device) AND usd_per_device > 0),
    as_of          DATE NOT NULL,
    source         VARCHAR NOT NULL
);

CREATE TABLE constants (
    name   VARCHAR PRIMARY KEY,
    value  DOUBLE NOT NULL CHECK (isfinite(value)),
    unit   VARCHAR NOT NULL,
    source VARCHAR,
    note   VARCHAR
);

-- Measured rows, one value each, in the unified schema of spec 50 (imported from
-- data/benchmarks/*.csv by ridgeline.benchmarks, the source files kept verbatim).
CREATE TABLE benchmarks (
    id             VARCHAR PRIMARY KEY,
    source         VARCHAR NOT NULL,
    file           VARCHAR NOT NULL,
    file_hardware  VARCHAR NOT NULL,
    hardware       VARCHAR,
    runtime        VARCHAR,
    runtime_version VARCHAR,
    model          VARCHAR,
    weight_quant   VARCHAR,
    kv_dtype       VARCHAR,
    tp             INTEGER,
    pp             INTEGER,
    ep             INTEGER,
    batch          INTEGER,
    prompt_tokens  BIGINT,
    output_tokens  BIGINT,
    depth          BIGINT,
    op             VARCHAR,
    ranks          INTEGER,
    nodes          INTEGER,
    devices_per_node INTEGER,
    size_bytes     DOUBLE CHECK (isfinite(size_bytes)),
    phase          VARCHAR CHECK (phase IN ('prefill', 'decode', 'e2e', 'op', 'comm')),
    dtype          VARCHAR,
    gemm_m         BIGINT,
    gemm_n         BIGINT,
    gemm_k         BIGINT,
    metric         VARCHAR NOT NULL,
    value          DOUBLE NOT NULL CHECK (isfinite(value)),
    unit           VARCHAR NOT NULL,
    flags          VARCHAR,
    notes          VARCHAR,
    not_priced     VARCHAR
);

-- Fitted efficiencies (spec 50), loaded from data/calibration/fits.csv as `ridgeline calibrate`
-- wrote it: one row per (device or '*' profile, runtime, memory technology, precision, phase);
-- a precision other than '*' is a weight format's own quantized-GEMM efficiency.
CREATE TABLE calibration (
    hardware          VARCHAR NOT NULL,
    runtime           VARCHAR NOT NULL,
    memory            VARCHAR NOT NULL,
    precision         VARCHAR NOT NULL,
    phase             VARCHAR NOT NULL,
    eta_mem           DOUBLE NOT NULL CHECK (isfinite(eta_mem) AND eta_mem > 0 AND eta_mem <= 1),
    eta_compute       DOUBLE NOT NULL CHECK (isfinite(eta_compute) AND eta_compute > 0 AND eta_compute <= 1),
    t_launch_us       DOUBLE NOT NULL CHECK (isfinite(t_launch_us) AND t_launch_us >= 0),
    t_step_us         DOUBLE NOT NULL CHECK (isfinite(t_step_us) AND t_step_us >= 0),
    eta_moe           DOUBLE NOT NULL CHECK (isfinite(eta_moe) AND eta_moe > 0 AND eta_moe <= 1),
    eta_compute_quant DOUBLE NOT NULL CHECK (isfinite(eta_compute_quant) AND eta_compute_quant > 0 AND eta_compute_quant <= 1),
    routing_skew      DOUBLE NOT NULL CHECK (isfinite(routing_skew) AND routing_skew >= 0),
    overlap           DOUBLE NOT NULL CHECK (isfinite(overlap) AND overlap >= 0 AND overlap <= 1),
    overlap_moe       DOUBLE CHECK (isfinite(overlap_moe) AND overlap_moe >= 0 AND overlap_moe <= 1),
    t_layer_us        DOUBLE NOT NULL CHECK (isfinite(t_layer_us) AND t_layer_us >= 0),
    n_rows            INTEGER NOT NULL CHECK (n_rows > 0),
    rms_log           DOUBLE NOT NULL CHECK (isfinite(rms_log) AND rms_log >= 0),
    pinned            VARCHAR,
    structure_version VARCHAR NOT NULL,
    data_hash         VARCHAR NOT NULL,
    fitted_at         VARCHAR NOT NULL,
    source            VARCHAR NOT NULL,
    -- the runtime version the fit's measurements ran (kernel tables); NULL where the rows span versions
    runtime_version   VARCHAR,
    -- a production runtime's fused attention kernels fitted on their own tables (kernel_fits.csv):
    -- a prefill step's and a decode step's; NULL where a row has none (priced as any kernel)
    attn_prefill_eta_compute DOUBLE CHECK (isfinite(attn_prefill_eta_compute) AND attn_prefill_eta_compute > 0 AND attn_prefill_eta_compute <= 1),
    attn_prefill_eta_mem     DOUBLE CHECK (isfinite(attn_prefill_eta_mem) AND attn_prefill_eta_mem > 0 AND attn_prefill_eta_mem <= 1),
    attn_prefill_t_floor_us  DOUBLE CHECK (isfinite(attn_prefill_t_floor_us) AND attn_prefill_t_floor_us >= 0),
    attn_prefill_t_item_us   DOUBLE CHECK (isfinite(attn_prefill_t_item_us) AND attn_prefill_t_item_us >= 0),
    attn_decode_eta_compute DOUBLE CHECK (isfinite(attn_decode_eta_compute) AND attn_decode_eta_compute > 0 AND attn_decode_eta_compute <= 1),
    attn_decode_eta_mem     DOUBLE CHECK (isfinite(attn_decode_eta_mem) AND attn_decode_eta_mem > 0 AND attn_decode_eta_mem <= 1),
    attn_decode_t_floor_us  DOUBLE CHECK (isfinite(attn_decode_t_floor_us) AND attn_decode_t_floor_us >= 0),
    attn_decode_t_item_us   DOUBLE CHECK (isfinite(attn_decode_t_item_us) AND attn_decode_t_item_us >= 0),
    -- a production runtime's front-end time a request takes before its prefill, fitted on the
    -- lightly loaded serving runs replayed through the simulator (kernel_fits.csv, from
    -- serving_fits.csv); NULL for the benchmark-row fits (fits.csv), which have none
    t_request_us            DOUBLE CHECK (isfinite(t_request_us) AND t_request_us >= 0),
    PRIMARY KEY (hardware, runtime, memory, precision, phase)
);
