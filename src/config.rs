//! Session options under the `gpu.` prefix, settable with `SET gpu.<name> = <value>`.

use std::fmt;
use std::str::FromStr;

use std::any::Any;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigField, ExtensionOptions, Visit};
use datafusion::error::{DataFusionError, Result};

/// A byte count written like `512M`, `8GiB`, `1073741824` or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ByteSize {
    /// Chosen by the runtime (for `memory_limit`: 90% of the device memory free at start).
    #[default]
    Auto,
    Bytes(u64),
}

impl ByteSize {
    /// The explicit value, if one was set.
    pub fn bytes(self) -> Option<u64> {
        match self {
            ByteSize::Auto => None,
            ByteSize::Bytes(b) => Some(b),
        }
    }
}

impl FromStr for ByteSize {
    type Err = DataFusionError;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") || t.is_empty() {
            return Ok(ByteSize::Auto);
        }
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| {
            DataFusionError::Configuration(format!(
                "invalid byte size '{s}': expected a number with an optional unit (K, M, G, T), or 'auto'"
            ))
        })?;
        let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
            "" | "B" => 1,
            "K" | "KB" | "KIB" => 1 << 10,
            "M" | "MB" | "MIB" => 1 << 20,
            "G" | "GB" | "GIB" => 1 << 30,
            "T" | "TB" | "TIB" => 1 << 40,
            other => {
                return Err(DataFusionError::Configuration(format!(
                    "invalid byte size unit '{other}' in '{s}': use K, M, G or T"
                )));
            }
        };
        if !(value.is_finite() && value >= 0.0) {
            return Err(DataFusionError::Configuration(format!("invalid byte size '{s}'")));
        }
        Ok(ByteSize::Bytes((value * mult as f64) as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByteSize::Auto => write!(f, "auto"),
            ByteSize::Bytes(b) => write!(f, "{}", human_bytes(*b)),
        }
    }
}

/// `ConfigField` for an option value written as text: shown with `Display`, set with `FromStr`
/// (whose error is the user's message), reset to `Default` (`auto` for the types here).
macro_rules! config_field_from_str {
    ($($t:ty),*) => {$(
        impl ConfigField for $t {
            fn visit<V: Visit>(&self, v: &mut V, key: &str, description: &'static str) {
                v.some(key, self, description)
            }

            fn set(&mut self, _key: &str, value: &str) -> Result<()> {
                *self = value.parse()?;
                Ok(())
            }

            fn reset(&mut self, _key: &str) -> Result<()> {
                *self = <$t>::default();
                Ok(())
            }
        }
    )*};
}

config_field_from_str!(ByteSize, JoinAlgorithmSetting, AggregateAlgorithmSetting, PlacementSetting, DevicesSetting);

/// Formats a byte count with a binary unit, exactly when it divides evenly (`8GiB`, `1.50GiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if b >= size {
            return if b.is_multiple_of(size) {
                format!("{}{name}", b / size)
            } else {
                format!("{:.2}{name}", b as f64 / size as f64)
            };
        }
    }
    format!("{b}B")
}

// The settings whose values are enums of their own.

/// A GPU join algorithm with its materialisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum JoinAlgorithm {
    /// Non-partitioned hash join: one global table; probe side in order.
    Npj,
    /// Radix-partitioned hash join, gathering at row ids.
    PhjGfur,
    /// Radix-partitioned hash join, payloads partitioned with the keys.
    PhjGftr,
    /// Sort-merge join, gathering at row ids.
    SmjGfur,
    /// Sort-merge join, payloads sorted with the keys.
    SmjGftr,
    /// The multi-GPU sort-merge join over the session's device set (`gpu.devices`): both sides
    /// range-partitioned across the devices on the top bits of their key words (one histogram
    /// exchange, one all-to-all copy of the rows), each device's share joined by `smj_gftr`.
    SmjMultiGpu,
}

impl JoinAlgorithm {
    pub const ALL: [JoinAlgorithm; 5] = [
        JoinAlgorithm::Npj,
        JoinAlgorithm::PhjGfur,
        JoinAlgorithm::PhjGftr,
        JoinAlgorithm::SmjGfur,
        JoinAlgorithm::SmjGftr,
    ];

    /// Every algorithm: the single-device ones, then the multi-GPU join.
    pub const EVERY: [JoinAlgorithm; 6] = [
        JoinAlgorithm::Npj,
        JoinAlgorithm::PhjGfur,
        JoinAlgorithm::PhjGftr,
        JoinAlgorithm::SmjGfur,
        JoinAlgorithm::SmjGftr,
        JoinAlgorithm::SmjMultiGpu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JoinAlgorithm::Npj => "npj",
            JoinAlgorithm::PhjGfur => "phj_gfur",
            JoinAlgorithm::PhjGftr => "phj_gftr",
            JoinAlgorithm::SmjGfur => "smj_gfur",
            JoinAlgorithm::SmjGftr => "smj_gftr",
            JoinAlgorithm::SmjMultiGpu => "smj_multi_gpu",
        }
    }

    /// Whether payloads are transformed with the keys.
    pub fn gftr(self) -> bool {
        matches!(self, JoinAlgorithm::PhjGftr | JoinAlgorithm::SmjGftr | JoinAlgorithm::SmjMultiGpu)
    }

    /// Whether the algorithm spreads one join over several devices.
    pub fn multi_gpu(self) -> bool {
        self == JoinAlgorithm::SmjMultiGpu
    }
}

impl FromStr for JoinAlgorithm {
    type Err = DataFusionError;

    /// One algorithm by name (`npj`, `phj_gfur`, ...), not a family or `auto`.
    fn from_str(s: &str) -> std::result::Result<Self, DataFusionError> {
        let t = s.trim().to_ascii_lowercase();
        JoinAlgorithm::EVERY.iter().copied().find(|a| a.name() == t).ok_or_else(|| {
            let names = JoinAlgorithm::EVERY.map(|a| a.name()).join(", ");
            DataFusionError::Configuration(format!("unknown join algorithm '{s}'; choose one of {names}"))
        })
    }
}

impl fmt::Display for JoinAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `gpu.join.algorithm` option: an algorithm, a family whose materialisation is chosen, or
/// `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinAlgorithmSetting {
    #[default]
    Auto,
    Phj,
    Smj,
    Fixed(JoinAlgorithm),
}

impl JoinAlgorithmSetting {
    pub const NAMES: &'static str = "auto, npj, phj, smj, phj_gfur, phj_gftr, smj_gfur, smj_gftr, smj_multi_gpu";
}

impl FromStr for JoinAlgorithmSetting {
    type Err = DataFusionError;

    fn from_str(s: &str) -> std::result::Result<Self, DataFusionError> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "auto" | "" => JoinAlgorithmSetting::Auto,
            "phj" => JoinAlgorithmSetting::Phj,
            "smj" => JoinAlgorithmSetting::Smj,
            _ => match t.parse::<JoinAlgorithm>() {
                Ok(a) => JoinAlgorithmSetting::Fixed(a),
                Err(_) => {
                    return Err(DataFusionError::Configuration(format!(
                        "unknown gpu.join.algorithm '{s}'; choose one of {}",
                        Self::NAMES
                    )));
                }
            },
        })
    }
}

impl fmt::Display for JoinAlgorithmSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinAlgorithmSetting::Auto => f.write_str("auto"),
            JoinAlgorithmSetting::Phj => f.write_str("phj"),
            JoinAlgorithmSetting::Smj => f.write_str("smj"),
            JoinAlgorithmSetting::Fixed(a) => f.write_str(a.name()),
        }
    }
}

/// Most devices `gpu.devices` may list (logical devices included).
pub const MAX_DEVICES: usize = 16;

/// `gpu.devices`: the session's device set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DevicesSetting {
    /// `gpu.device` alone.
    #[default]
    One,
    /// Every GPU the driver lists.
    All,
    /// These CUDA ordinals, in order (the first is the home device). An ordinal listed again is
    /// another logical device on the same GPU: its own stream pool and budget, the GPU's memory
    /// shared, so that the multi-GPU paths run on one GPU.
    List(Vec<usize>),
}

impl DevicesSetting {
    /// The ordinals of the set, `home` (`gpu.device`) first when the setting lists none, and
    /// `count` the devices the driver has (for `all`).
    pub fn ordinals(&self, home: usize, count: usize) -> Vec<usize> {
        match self {
            DevicesSetting::One => vec![home],
            DevicesSetting::All => (0..count.max(1)).collect(),
            DevicesSetting::List(l) => l.clone(),
        }
    }
}

impl FromStr for DevicesSetting {
    type Err = DataFusionError;

    fn from_str(s: &str) -> std::result::Result<Self, DataFusionError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "" | "default" => return Ok(DevicesSetting::One),
            "all" => return Ok(DevicesSetting::All),
            _ => {}
        }
        let list =
            t.split(',').map(|o| o.trim().parse::<usize>()).collect::<std::result::Result<Vec<_>, _>>().map_err(
                |_| {
                    DataFusionError::Configuration(format!(
                        "gpu.devices '{s}' is not a list of CUDA ordinals: use e.g. '0,1', 'all', or '0,0' for two \
                     logical devices on GPU 0"
                    ))
                },
            )?;
        if list.len() > MAX_DEVICES {
            return Err(DataFusionError::Configuration(format!(
                "gpu.devices lists {} devices; at most {}",
                list.len(),
                MAX_DEVICES
            )));
        }
        Ok(DevicesSetting::List(list))
    }
}

impl fmt::Display for DevicesSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevicesSetting::One => Ok(()),
            DevicesSetting::All => f.write_str("all"),
            DevicesSetting::List(l) => f.write_str(&l.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(",")),
        }
    }
}

/// `gpu.aggregate.algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AggregateAlgorithmSetting {
    /// Hash group-by until the cost model chooses.
    #[default]
    Auto,
    Hash,
    Sort,
    Partition,
}

impl FromStr for AggregateAlgorithmSetting {
    type Err = DataFusionError;

    fn from_str(s: &str) -> std::result::Result<Self, DataFusionError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(AggregateAlgorithmSetting::Auto),
            "hash" => Ok(AggregateAlgorithmSetting::Hash),
            "sort" => Ok(AggregateAlgorithmSetting::Sort),
            "partition" => Ok(AggregateAlgorithmSetting::Partition),
            _ => Err(DataFusionError::Configuration(format!(
                "unknown gpu.aggregate.algorithm '{s}'; choose one of auto, hash, sort, partition"
            ))),
        }
    }
}

impl fmt::Display for AggregateAlgorithmSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AggregateAlgorithmSetting::Auto => "auto",
            AggregateAlgorithmSetting::Hash => "hash",
            AggregateAlgorithmSetting::Sort => "sort",
            AggregateAlgorithmSetting::Partition => "partition",
        })
    }
}

/// The `gpu.placement` option: whether the cost model decides where an eligible operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlacementSetting {
    /// The GPU when its estimate (transfers included) beats the CPU's, or when no estimate exists.
    #[default]
    Cost,
    /// Every eligible operator over `gpu.cost.min_rows` on the GPU (for testing the GPU path).
    Always,
}

impl std::str::FromStr for PlacementSetting {
    type Err = datafusion::error::DataFusionError;

    fn from_str(s: &str) -> datafusion::error::Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cost" | "" => Ok(PlacementSetting::Cost),
            "always" => Ok(PlacementSetting::Always),
            _ => Err(datafusion::error::DataFusionError::Configuration(format!(
                "unknown gpu.placement '{s}'; choose cost (the cost model decides) or always (every eligible operator on the GPU)"
            ))),
        }
    }
}

impl std::fmt::Display for PlacementSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlacementSetting::Cost => "cost",
            PlacementSetting::Always => "always",
        })
    }
}

/// Declares the options struct, its defaults, and DataFusion's `ExtensionOptions` with the keys
/// listed under their full `gpu.` names (DataFusion's `extensions_options!` lists extension keys
/// without their prefix, so `information_schema.df_settings` would show a bare `min_rows`). Each
/// field has a key grouped by concern (`memory.limit`, `join.algorithm`); `gpu.experimental.*`
/// holds switches kept for measurements, whose defaults are the measured choice.
macro_rules! gpu_options {
    ($(#[doc = $sd:literal])* pub struct $name:ident { $($(#[doc = $d:literal])* pub $field:ident: $ty:ty, key = $key:literal, default = $default:expr)* }) => {
        $(#[doc = $sd])*
        #[derive(Debug, Clone)]
        pub struct $name {
            $($(#[doc = $d])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }

        impl ExtensionOptions for $name {
            fn as_any(&self) -> &dyn Any {
                self
            }

            fn as_any_mut(&mut self) -> &mut dyn Any {
                self
            }

            fn cloned(&self) -> Box<dyn ExtensionOptions> {
                Box::new(self.clone())
            }

            fn set(&mut self, key: &str, value: &str) -> Result<()> {
                // Each option under its grouped name (`memory.limit`), and under the flat name it
                // had before the options were grouped (`memory_limit`), so that settings written
                // then keep working.
                $(
                    if key == $key || key == stringify!($field) {
                        return ConfigField::set(&mut self.$field, "", value);
                    }
                )*
                Err(DataFusionError::Configuration(format!(
                    "unknown option gpu.{key}; the gpu. options are: {}",
                    [$($key),*].join(", ")
                )))
            }

            fn entries(&self) -> Vec<ConfigEntry> {
                let mut v = Entries(Vec::new());
                $(
                    ConfigField::visit(
                        &self.$field,
                        &mut v,
                        concat!("gpu.", $key),
                        concat!($($d),*).trim(),
                    );
                )*
                v.0
            }
        }
    };
}

/// Collects option entries.
struct Entries(Vec<ConfigEntry>);

impl Visit for Entries {
    fn some<V: fmt::Display>(&mut self, key: &str, value: V, description: &'static str) {
        self.0.push(ConfigEntry { key: key.to_string(), value: Some(value.to_string()), description });
    }

    fn none(&mut self, key: &str, description: &'static str) {
        self.0.push(ConfigEntry { key: key.to_string(), value: None, description });
    }
}

gpu_options! {
    /// Options of the GPU extension, under the `gpu.` prefix.
    pub struct GpuConfig {
        /// Run eligible joins and aggregates on the GPU. When false the rule leaves the plan untouched.
        pub enable: bool, key = "enable", default = true
        /// CUDA ordinal of the GPU to use.
        pub device: usize, key = "device", default = 0
        /// The session's device set: '' (gpu.device alone), 'all', or CUDA ordinals such as '0,1', the first is the
        /// home device; an ordinal listed again is another logical device on the same GPU. Multi-GPU joins
        /// (gpu.join.algorithm = smj_multi_gpu) and out-of-core joins spread over the set.
        pub devices: DevicesSetting, key = "devices", default = DevicesSetting::One
        /// With several devices (gpu.devices), run partition p of GPU uploads, filters, aggregates and Partitioned
        /// joins on device p mod n; CollectLeft joins and device exchanges stay on the home device. Off by default: no
        /// faster on two GPUs, and slow while another GPU pins staging buffers.
        pub devices_spread_partitions: bool, key = "devices_spread_partitions", default = false
        /// Most device memory this session's GPU operators may hold at once (e.g. '8G'); 'auto' is the device's budget,
        /// 90% of the memory free at first use. Work that cannot fit falls back to the CPU (gpu.memory.cpu_fallback); a
        /// join whose build needs more runs out of core or on the CPU.
        pub memory_limit: ByteSize, key = "memory.limit", default = ByteSize::Auto
        /// When device memory runs out (over gpu.memory.limit, or refused by the driver), DataFusion's own operators
        /// finish a GPU join's or aggregate's work, or the query runs again on DataFusion's plan; EXPLAIN ANALYZE
        /// counts cpu_fallbacks and cpu_reruns. false fails the query instead.
        pub cpu_fallback: bool, key = "memory.cpu_fallback", default = true
        /// Operators whose estimated input has fewer rows stay on the CPU (unknown sizes do not count as small), and a
        /// GPU aggregate partition whose input has fewer rows at run time is aggregated by DataFusion (EXPLAIN ANALYZE
        /// counts cpu_partitions). 0 turns both off.
        pub min_rows: usize, key = "cost.min_rows", default = 100_000
        /// Size of each pinned host staging buffer used for host-to-device copies.
        pub staging_buffer_size: ByteSize, key = "transfer.staging_buffer_size", default = ByteSize::Bytes(32 << 20)
        /// Most host memory page-locked in place for direct uploads: large buffers uploaded a second time (in-memory tables) are registered and then copied at the link's full speed; '0' disables, 'auto' is 8GiB.
        pub host_register_limit: ByteSize, key = "memory.host_register_limit", default = ByteSize::Auto
        /// Most pinned (page-locked) host memory the process holds for this session: downloads and out-of-core join
        /// rows are pinned under it, in ordinary memory beyond; pinning a table past it fails. Staging buffers count
        /// but are never refused. 'auto': a quarter of host RAM.
        pub pinned_memory_limit: ByteSize, key = "memory.pinned_limit", default = ByteSize::Auto
        /// Host threads that copy into pinned staging buffers (0: one per core, at most 16).
        pub transfer_threads: usize, key = "transfer.threads", default = 0
        /// Decimal128 columns of at most 18 digits cross the link through the staging buffers as 8-byte integers, widened on the device (half the bytes); a column holding a value past 64 bits goes again as it is.
        pub narrow_decimals: bool, key = "transfer.narrow_decimals", default = true
        /// Int64 and Decimal128 (at most 18 digits) columns are staged and sent as 4-byte integers when their values
        /// fit, widened on the device; a piece holding a value past 32 bits goes again at 8 bytes (decimals, with
        /// gpu.transfer.narrow_decimals) or as it is.
        pub narrow_integers: bool, key = "transfer.narrow_integers", default = true
        /// Int32, Date32, Int64 and Decimal128 (at most 18 digits) columns with values in a narrow range are staged and
        /// sent as 1- or 2-byte offsets above a sampled base, widened on the GPU. Off by default: encoding slows the
        /// copy threads; use it where the link, not staging, bounds uploads.
        pub narrow_offsets: bool, key = "transfer.narrow_offsets", default = false
        /// Fill the staging buffers with streaming (non-temporal) stores, which write whole cache lines without reading
        /// them first (x86-64; elsewhere ordinary stores). Off by default: staged uploads ran slower with them on an
        /// H100.
        pub streaming_stores: bool, key = "experimental.streaming_stores", default = false
        /// CUDA streams the GPU operators' partitions take round-robin (1 to 64). Partitions that share a stream wait for each other's work at every synchronisation.
        pub streams: usize, key = "streams", default = 16
        /// GPU join algorithm: auto (the cost model chooses, also at run time), npj (non-partitioned hash join), phj or
        /// smj (radix-partitioned hash or sort-merge join, materialisation chosen), or phj_gfur, phj_gftr, smj_gfur,
        /// smj_gftr. Joins relying on probe order take npj.
        pub join_algorithm: JoinAlgorithmSetting, key = "join.algorithm", default = JoinAlgorithmSetting::Auto
        /// Rows per GPU batch of host input: a join's host probe input, an aggregate's and a filter's host input are coalesced into chunks of about this many rows, each uploaded while the one before it is processed: each chunk costs launches whatever its size.
        pub batch_rows: usize, key = "batch_rows", default = 1 << 22
        /// Most rows of a GPU join's output batch: matches past it come out in further batches, each costing launches
        /// and synchronisations, so long batches suit device-resident inputs. At least 16,384; fewer only when a
        /// quarter of gpu.memory.limit cannot hold the batches in flight.
        pub join_window_rows: usize, key = "join.window_rows", default = 1 << 26
        /// Batches a GPU join reads ahead from its probe input while its build is collected and built, so probe work
        /// and transfers overlap the build; 0 reads the probe once the build is ready. Host inputs are read ahead only
        /// with gpu.join.pipelined_inputs; not for out-of-core joins.
        pub probe_read_ahead: usize, key = "join.probe_read_ahead", default = 1
        /// How a GPU join takes inputs that arrive over time (a shuffle's, a CPU child's): true uploads each build
        /// batch as it arrives and reads the probe side ahead meanwhile; false receives both inputs whole, then joins.
        /// Both give the same answers; EXPLAIN ANALYZE shows the input waits.
        pub pipelined_inputs: bool, key = "join.pipelined_inputs", default = true
        /// GPU group-by algorithm: auto (the cost model chooses), hash (a global hash table of the keys gives group ids, then shared-memory or global accumulators), sort (a radix sort of the keys gives group ids) or partition (radix partitions of the keys, each numbered and aggregated in shared memory).
        pub aggregate_algorithm: AggregateAlgorithmSetting, key = "aggregate.algorithm", default = AggregateAlgorithmSetting::Auto
        /// Where eligible operators run: cost (on the GPU when the cost model's estimate, with transfers of inputs not
        /// on the device, beats the CPU's, or when no input size is known; EXPLAIN shows both estimates) or always
        /// (every eligible operator over gpu.cost.min_rows on the GPU).
        pub placement: PlacementSetting, key = "placement", default = PlacementSetting::Cost
        /// With gpu.placement = cost, an operator goes to the GPU only when the model expects it to run at least this many times faster there than on the CPU, transfers included: 1.0 takes any expected gain; more keeps near ties, where the model's error decides, on the CPU.
        pub min_speedup: f64, key = "cost.min_speedup", default = 1.0
        /// Run a join or aggregate whose inputs are all on the device (cached scans, GPU outputs, device filters over
        /// them) on the GPU whatever gpu.cost.min_rows and the estimate say, as the CPU would download them; the
        /// estimate still picks the algorithm. false places them like any other.
        pub resident_inputs: bool, key = "cost.resident_inputs", default = true
        /// With gpu.placement = cost, price a join kept on the CPU under a GPU parent together with the CPU-kept joins
        /// it reads, and move them to the GPU when they cost less there together (each reading the one below without a
        /// transfer); false prices one join below the parent at a time.
        pub join_chain_pricing: bool, key = "cost.join_chain_pricing", default = true
        /// With gpu.placement = cost, a GPU aggregate whose input size DataFusion cannot estimate prices the CPU-kept
        /// joins below it at the input's likely size from the plan's shape, moving each to the GPU when cheaper there;
        /// false leaves such aggregates unpriced.
        pub aggregate_join_pricing: bool, key = "cost.aggregate_join_pricing", default = true
        /// Price the upload of a join input that is a device-evaluated filter (gpu.fuse.filters) at
        /// datafusion.optimizer.default_filter_selectivity when DataFusion estimates it at 100% for want of column
        /// min/max (in-memory tables). false prices every input row's upload.
        pub default_selectivity_for_unbounded_filters: bool, key = "cost.default_selectivity_for_unbounded_filters", default = true
        /// Folder of the cached device profile the cost model uses ('' for the user cache folder, e.g. ~/.cache/datafusion-gpu/profiles); written by `datafusion-gpu bench sweep --calibrate`.
        pub profile_dir: String, key = "cost.profile_dir", default = String::new()
        /// Evaluate the filters and projections directly below a GPU aggregate or join on the GPU, uploading raw
        /// columns: arithmetic, comparisons, AND/OR, CASE, IN, casts, LIKE, date_part, substr, scalar subqueries.
        /// EXPLAIN shows what was fused or why not; false keeps them on the CPU.
        pub fuse_expressions: bool, key = "fuse.expressions", default = true
        /// With gpu.fuse.expressions, run on the GPU the FilterExecs below a GPU aggregate or join and those over its
        /// output (a HAVING). Partitions whose filter keeps few of their first 65536 rows are filtered on the host
        /// first (gpu.fuse.host_filter_below); false leaves them to the CPU.
        pub fuse_filters: bool, key = "fuse.filters", default = true
        /// With gpu.fuse.filters: a partition whose bottom filter keeps less than this fraction of its first 65536 rows is filtered on the host before the upload; otherwise its rows are uploaded whole and only the GPU filters them (0 never filters on the host, 1 always does).
        pub host_filter_below: f64, key = "fuse.host_filter_below", default = 0.5
        /// Decide the host pre-filter by price instead of gpu.fuse.host_filter_below: the host filters a partition when
        /// its measured filtering time per sampled row is below the upload time of the rows the filter drops (the
        /// profile's transfer cost, the link shared by the partitions).
        pub host_filter_priced: bool, key = "fuse.host_filter_priced", default = true
        /// Merge a GPU Partial aggregate's states into the GPU Final aggregate above it on the device, removing the
        /// RepartitionExec or CoalescePartitionsExec between them, so states never cross PCIe (the output keeps the
        /// hash partitioning); false keeps DataFusion's exchange on the host.
        pub aggregate_exchange: bool, key = "aggregate.exchange", default = true
        /// With gpu.aggregate.exchange, also remove the exchange when the GPU Partial reads a CPU operator of inexact
        /// row count (a CPU join, an unfused filter). Off by default: such partitions often run on the CPU, and
        /// DataFusion's exchange streams each one's states as it ends.
        pub aggregate_exchange_host_input: bool, key = "experimental.aggregate_exchange_host_input", default = false
        /// Plan a SinglePartitioned aggregate over a hash RepartitionExec of a GPU operator's output as Partial and
        /// FinalPartitioned aggregates when both then run on the GPU with the exchange on the device, so the GPU output
        /// does not cross PCIe twice; false keeps the repartition.
        pub aggregate_split_device_input: bool, key = "aggregate.split_device_input", default = true
        /// Keep the columns of in-memory tables and of Parquet tables in device memory once a GPU operator reads them,
        /// for later queries of any session: only the columns read, loaded again when the batches or a file change.
        /// SELECT * FROM gpu_table_cache() shows the cache; false reads the tables each query.
        pub table_cache: bool, key = "table_cache", default = true
        /// Most device memory the table cache holds (e.g. '20G'), within gpu.memory.limit: past it the least recently used columns are evicted ('auto': half of gpu.memory.limit). Cached columns count against the memory limit of the session that uploaded them while they stay cached.
        pub table_cache_limit: ByteSize, key = "table_cache.limit", default = ByteSize::Auto
        /// Rows of a cached table's device batch: GPU operators read its consecutive partitions merged into batches of
        /// up to this many rows (a sorted table's stay apart), so resident data runs in a few long chains of launches;
        /// CPU operators read its partitions. Changing it uploads again.
        pub table_cache_batch_rows: usize, key = "table_cache.batch_rows", default = 1 << 26
        /// Keep cached columns on the device in fewer bytes: integers, dates and decimals in the fewest bytes their
        /// values need (their distance above the least in 1, 2 or 3 bytes, or the values in 4 or 8), strings and
        /// binaries of few distinct values (at most 4,096 in their first 65,536 rows, 65,536 in all) as 1- or 2-byte
        /// codes into those values. Full-width copies stay beside them only while gpu.table_cache.limit has room:
        /// those copies go first, and a scan widens the column again. More tables fit the device; false keeps every
        /// cached column at its Arrow width.
        pub table_cache_compress: bool, key = "table_cache.compress", default = true
        /// Make a compact host image of a cached table's columns (gpu_cache()): integers and decimals without nulls in
        /// the fewest bytes their values need, strings as lengths and bytes, so cold uploads move fewer bytes. It costs
        /// host memory and time at caching; false uploads the arrays.
        pub table_cache_host_image: bool, key = "table_cache.host_image", default = true
        /// Keep the host images of gpu.table_cache.host_image in page-locked (pinned) memory within
        /// gpu.memory.pinned_limit, so uploads send them without a staging copy; an image that does not fit stays in
        /// ordinary memory. Pinned memory cannot be swapped; false keeps every image pageable.
        pub table_cache_host_image_pinned: bool, key = "table_cache.host_image_pinned", default = true
        /// Run GPU operators over cached tables that fit one device batch (gpu.table_cache.batch_rows) as one
        /// partition, without the repartitions and coalesces between them; CPU readers get their planned partitioning
        /// back. Only where every scan below is such a table and no order is kept.
        pub table_cache_one_partition: bool, key = "table_cache.one_partition", default = true
        /// Keep the hash RepartitionExecs below a Partitioned GPU join. false (the default) lets it read their inputs
        /// in CollectLeft mode (one build from all build partitions, each probe partition probed as it comes): the CPU
        /// hashes neither input and GPU inputs stay on the device.
        pub join_repartition: bool, key = "join.repartition", default = false
        /// Swap the inputs of an inner CollectLeft GPU join when the plan's likely sizes, not a guessed filter
        /// selectivity, put its build side at 4 or more times its probe side and at least 10 times gpu.cost.min_rows.
        /// EXPLAIN says "inputs swapped"; false keeps DataFusion's sides.
        pub join_swap_lopsided: bool, key = "join.swap_lopsided", default = true
        /// An inner GPU join without a residual filter that runs as one partition over device inputs swaps its sides
        /// when, at run time, its build side has at least 262,144 rows and 4 or more times the probe side's. EXPLAIN
        /// ANALYZE counts swapped_at_run_time; false keeps the plan's sides.
        pub join_swap_at_run_time: bool, key = "join.swap_at_run_time", default = true
        /// How a Partitioned GPU join read around its repartitions is judged once repriced for its one build: false
        /// (the default) keeps it unless the Partitioned GPU join as placed is expected to be faster; true keeps it
        /// only when it is expected to beat the CPU join.
        pub reprice_against_cpu: bool, key = "experimental.reprice_against_cpu", default = false
    }
}

impl ConfigExtension for GpuConfig {
    const PREFIX: &'static str = "gpu";
}

impl GpuConfig {
    /// The options of a session, or the defaults if the extension is not registered.
    pub fn from_options(options: &datafusion::config::ConfigOptions) -> GpuConfig {
        options.extensions.get::<GpuConfig>().cloned().unwrap_or_default()
    }

    /// The CUDA ordinal of the session's home device, where its GPU operators run: the first
    /// of `gpu.devices` (GPU 0 for `all`), or `gpu.device` when that lists none.
    pub fn home_device(&self) -> usize {
        match &self.devices {
            DevicesSetting::One => self.device,
            DevicesSetting::All => 0,
            DevicesSetting::List(l) => l.first().copied().unwrap_or(self.device),
        }
    }
}

/// `docs/options.md`: every `gpu.*` option with its default and meaning, from the declarations
/// above (which `SHOW ALL` and `information_schema.df_settings` also read).
pub fn options_markdown() -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "# Options\n\n\
         <!-- Generated from src/config.rs; do not edit. After changing an option there, run\n     \
         DFG_UPDATE_DOCS=1 cargo test --release options_doc_is_current -->\n\n\
         Set with `SET gpu.<name> = <value>` in SQL, or on the `SessionConfig`\n\
         (`SessionConfig::new().with_option_extension(GpuConfig { .. })`). `SHOW ALL` lists them with\n\
         their current values. Options are grouped by concern (`memory`, `transfer`, `join`,\n\
         `aggregate`, `fuse`, `cost`); `experimental` holds switches kept for measurements, whose\n\
         defaults are the measured choice. The flat names of earlier releases (`gpu.memory_limit`,\n\
         `gpu.join_algorithm`) are still accepted by `SET`.\n\n\
         | option | default | meaning |\n|---|---|---|\n",
    );
    let mut entries = GpuConfig::default().entries();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    for e in entries {
        let default = e.value.as_deref().unwrap_or("(none)");
        let _ = writeln!(out, "| `{}` | `{default}` | {} |", e.key, e.description.replace('|', "\\|"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/options.md is what `options_markdown` makes of the declarations; with
    /// `DFG_UPDATE_DOCS=1` the test writes it first.
    #[test]
    fn options_doc_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/options.md");
        let want = options_markdown();
        if std::env::var_os("DFG_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &want).expect("writing docs/options.md");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/options.md is stale: run `DFG_UPDATE_DOCS=1 cargo test --release options_doc_is_current`"
        );
    }

    /// Options are set under their grouped names and under the flat names of earlier
    /// releases; SHOW ALL lists the grouped names only; an unknown name lists the valid ones.
    #[test]
    fn grouped_names_and_the_flat_ones_set_the_same_option() {
        let mut cfg = GpuConfig::default();
        cfg.set("memory.limit", "8M").unwrap();
        assert_eq!(cfg.memory_limit, ByteSize::Bytes(8 << 20));
        cfg.set("memory_limit", "16M").unwrap();
        assert_eq!(cfg.memory_limit, ByteSize::Bytes(16 << 20));
        cfg.set("join.algorithm", "npj").unwrap();
        cfg.set("experimental.streaming_stores", "true").unwrap();
        assert!(cfg.streaming_stores);
        let keys: Vec<String> = cfg.entries().into_iter().map(|e| e.key).collect();
        assert!(keys.contains(&"gpu.memory.limit".to_string()) && !keys.contains(&"gpu.memory_limit".to_string()));
        assert!(keys.iter().all(|k| k.starts_with("gpu.")), "{keys:?}");
        let err = cfg.set("memory.limits", "1G").unwrap_err().to_string();
        assert!(err.contains("gpu.memory.limits") && err.contains("memory.limit,"), "{err}");
        // Through DataFusion's SET path: the extension's prefix, then the grouped key.
        let mut extensions = datafusion::config::Extensions::new();
        extensions.insert(GpuConfig::default());
        let mut options = datafusion::config::ConfigOptions::new().with_extensions(extensions);
        options.set("gpu.memory.limit", "1G").unwrap();
        options.set("gpu.cost.min_rows", "0").unwrap();
        let got = GpuConfig::from_options(&options);
        assert_eq!((got.memory_limit, got.min_rows), (ByteSize::Bytes(1 << 30), 0));
    }

    #[test]
    fn byte_sizes_parse_and_print() {
        assert_eq!("auto".parse::<ByteSize>().unwrap(), ByteSize::Auto);
        assert_eq!("1024".parse::<ByteSize>().unwrap(), ByteSize::Bytes(1024));
        assert_eq!("8G".parse::<ByteSize>().unwrap(), ByteSize::Bytes(8 << 30));
        assert_eq!("512MiB".parse::<ByteSize>().unwrap(), ByteSize::Bytes(512 << 20));
        assert_eq!("1.5g".parse::<ByteSize>().unwrap(), ByteSize::Bytes(3 << 29));
        assert!("12 parsecs".parse::<ByteSize>().is_err());
        assert!("x".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize::Bytes(8 << 30).to_string(), "8GiB");
        assert_eq!(ByteSize::Bytes(3 << 29).to_string(), "1.50GiB");
        assert_eq!(ByteSize::Bytes(100).to_string(), "100B");
    }
}
