//! Typed handles of the kernels in `kernels/`. Each kernel is a constant naming its source file
//! and its entry point; a launch takes a handle, never a name built at run time, and a family
//! compiled per key word width is one [`PerKeyWord`] value picked by the width. [`ALL`] lists
//! every kernel: a test checks each name against its source file, and on a device the kernel
//! cache reads each kernel's parameter sizes so that a launch with arguments of the wrong number
//! or widths is refused instead of run.

/// One kernel source file of `kernels/`, compiled as one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    Copy,
    Scan,
    Radix,
    Gather,
    Keys,
    Select,
    Materialize,
    Verify,
    Join,
    Groupby,
    Spill,
}

impl Module {
    pub const ALL: [Module; 11] = [
        Module::Copy,
        Module::Scan,
        Module::Radix,
        Module::Gather,
        Module::Keys,
        Module::Select,
        Module::Materialize,
        Module::Verify,
        Module::Join,
        Module::Groupby,
        Module::Spill,
    ];

    /// The file's name without `.cu` (also the name of its cached CUBIN).
    pub fn name(self) -> &'static str {
        match self {
            Module::Copy => "copy",
            Module::Scan => "scan",
            Module::Radix => "radix",
            Module::Gather => "gather",
            Module::Keys => "keys",
            Module::Select => "select",
            Module::Materialize => "materialize",
            Module::Verify => "verify",
            Module::Join => "join",
            Module::Groupby => "groupby",
            Module::Spill => "spill",
        }
    }

    /// The CUDA C++ source, embedded in the binary.
    pub fn source(self) -> &'static str {
        match self {
            Module::Copy => include_str!("../../kernels/copy.cu"),
            Module::Scan => include_str!("../../kernels/scan.cu"),
            Module::Radix => include_str!("../../kernels/radix.cu"),
            Module::Gather => include_str!("../../kernels/gather.cu"),
            Module::Keys => include_str!("../../kernels/keys.cu"),
            Module::Select => include_str!("../../kernels/select.cu"),
            Module::Materialize => include_str!("../../kernels/materialize.cu"),
            Module::Verify => include_str!("../../kernels/verify.cu"),
            Module::Join => include_str!("../../kernels/join.cu"),
            Module::Groupby => include_str!("../../kernels/groupby.cu"),
            Module::Spill => include_str!("../../kernels/spill.cu"),
        }
    }
}

/// Headers the kernel files (and generated kernels) may `#include "name"`.
pub const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../kernels/common.cuh")),
    ("hash_table.cuh", include_str!("../../kernels/hash_table.cuh")),
];

/// One kernel: its module and its `extern "C"` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub module: Module,
    pub name: &'static str,
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}::{}", self.module.name(), self.name)
    }
}

/// A kernel compiled for 32- and 64-bit key words (the `_k32` and `_k64` entry points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerKeyWord {
    pub k32: Kernel,
    pub k64: Kernel,
}

/// Declares each kernel as a constant and lists them all in [`ALL`].
macro_rules! catalogue {
    ($($module:ident { $($konst:ident = $name:ident,)* })*) => {
        $($(pub const $konst: Kernel = Kernel { module: Module::$module, name: stringify!($name) };)*)*
        /// Every kernel of `kernels/`.
        pub const ALL: &[Kernel] = &[$($($konst,)*)*];
    };
}

/// Declares kernel families by key word width.
macro_rules! per_key_word {
    ($($konst:ident = $k32:ident, $k64:ident;)*) => {
        $(pub const $konst: PerKeyWord = PerKeyWord { k32: $k32, k64: $k64 };)*
    };
}

catalogue! {
    Copy {
        COPY_U128 = copy_u128,
        COPY_U8 = copy_u8,
        FILL_U32 = fill_u32,
        WIDEN_I64_TO_I128 = widen_i64_to_i128,
        WIDEN_I32_TO_I128 = widen_i32_to_i128,
        WIDEN_I32_TO_I64 = widen_i32_to_i64,
        WIDEN_U8_TO_I32 = widen_u8_to_i32,
        WIDEN_U16_TO_I32 = widen_u16_to_i32,
        WIDEN_U8_TO_I64 = widen_u8_to_i64,
        WIDEN_U16_TO_I64 = widen_u16_to_i64,
        WIDEN_U8_TO_I128 = widen_u8_to_i128,
        WIDEN_U16_TO_I128 = widen_u16_to_i128,
        WIDEN_U24_TO_I32 = widen_u24_to_i32,
        WIDEN_U24_TO_I64 = widen_u24_to_i64,
        WIDEN_U24_TO_I128 = widen_u24_to_i128,
        VALUE_RANGE_I32 = value_range_i32,
        VALUE_RANGE_I64 = value_range_i64,
        VALUE_RANGE_I128 = value_range_i128,
        PACK_I32_TO_U8 = pack_i32_to_u8,
        PACK_I32_TO_U16 = pack_i32_to_u16,
        PACK_I32_TO_U24 = pack_i32_to_u24,
        PACK_I64_TO_U8 = pack_i64_to_u8,
        PACK_I64_TO_U16 = pack_i64_to_u16,
        PACK_I64_TO_U24 = pack_i64_to_u24,
        PACK_I64_TO_I32 = pack_i64_to_i32,
        PACK_I128_TO_U8 = pack_i128_to_u8,
        PACK_I128_TO_U16 = pack_i128_to_u16,
        PACK_I128_TO_U24 = pack_i128_to_u24,
        PACK_I128_TO_I32 = pack_i128_to_i32,
        PACK_I128_TO_I64 = pack_i128_to_i64,
        OFFSETS_FROM_U8_LENGTHS = offsets_from_u8_lengths,
        OFFSETS_FROM_U32_LENGTHS = offsets_from_u32_lengths,
    }
    Scan {
        SCAN_REDUCE_U32 = scan_reduce_u32,
        SCAN_TILES_U32 = scan_tiles_u32,
        SCAN_REDUCE_U64 = scan_reduce_u64,
        SCAN_TILES_U64 = scan_tiles_u64,
        SCAN_REDUCE_U32_TO_U64 = scan_reduce_u32_to_u64,
        SCAN_TILES_U32_TO_U64 = scan_tiles_u32_to_u64,
    }
    Radix {
        RADIX_BOUNDARIES_K32 = radix_boundaries_k32,
        RADIX_BOUNDARIES_K64 = radix_boundaries_k64,
        RADIX_HISTOGRAM_K32_I16 = radix_histogram_k32_i16,
        RADIX_HISTOGRAM_K32_I8 = radix_histogram_k32_i8,
        RADIX_HISTOGRAM_K64_I8 = radix_histogram_k64_i8,
        RADIX_HISTOGRAM_K64_I16 = radix_histogram_k64_i16,
        RADIX_SCATTER_K32_V32 = radix_scatter_k32_v32,
        RADIX_SCATTER_K32_V64 = radix_scatter_k32_v64,
        RADIX_SCATTER_K64_V32 = radix_scatter_k64_v32,
        RADIX_SCATTER_K64_V64 = radix_scatter_k64_v64,
        RADIX_SCATTER_MULTI_K32_I16 = radix_scatter_multi_k32_i16,
        RADIX_SCATTER_MULTI_K64_I16 = radix_scatter_multi_k64_i16,
        RADIX_SCATTER_MULTI_K32_I8 = radix_scatter_multi_k32_i8,
        RADIX_SCATTER_MULTI_K64_I8 = radix_scatter_multi_k64_i8,
    }
    Gather {
        GATHER_U32 = gather_u32,
        GATHER_U64 = gather_u64,
        GATHER_U128 = gather_u128,
    }
    Keys {
        KEY_PACK_BOOL = key_pack_bool,
        KEY_HASH_BOOL = key_hash_bool,
        KEY_HASH_STR32 = key_hash_str32,
        KEY_HASH_STR64 = key_hash_str64,
        KEY_FINISH_U32 = key_finish_u32,
        KEY_FINISH_U64 = key_finish_u64,
        KEY_PACK_W1 = key_pack_w1,
        KEY_PACK_W2 = key_pack_w2,
        KEY_PACK_W4 = key_pack_w4,
        KEY_PACK_W8 = key_pack_w8,
        KEY_SINGLE_W1 = key_single_w1,
        KEY_SINGLE_W2 = key_single_w2,
        KEY_SINGLE_W4 = key_single_w4,
        KEY_SINGLE_W8 = key_single_w8,
        KEY_HASH_W1 = key_hash_w1,
        KEY_HASH_W2 = key_hash_w2,
        KEY_HASH_W4 = key_hash_w4,
        KEY_HASH_W8 = key_hash_w8,
        KEY_HASH_W16 = key_hash_w16,
    }
    Select {
        SELECT_COUNT = select_count,
        SELECT_WRITE = select_write,
        IOTA_U32 = iota_u32,
        SET_FLAGS = set_flags,
        FLAGS_TO_BITMAP = flags_to_bitmap,
        GATHER_PAIRS = gather_pairs,
        COMPOSE_ROWS = compose_rows,
        OR_NOT_FLAGS = or_not_flags,
    }
    Materialize {
        MAT_GATHER_BITS = mat_gather_bits,
        MAT_STR_LENGTHS32 = mat_str_lengths32,
        MAT_STR_LENGTHS64 = mat_str_lengths64,
        MAT_STR_COPY32 = mat_str_copy32,
        MAT_STR_COPY64 = mat_str_copy64,
        MAT_DICT_ROWS_W1 = mat_dict_rows_w1,
        MAT_DICT_ROWS_W2 = mat_dict_rows_w2,
        MAT_DICT_ROWS_W4 = mat_dict_rows_w4,
        MAT_DICT_ROWS_W8 = mat_dict_rows_w8,
        MAT_GATHER_W1 = mat_gather_w1,
        MAT_GATHER_W2 = mat_gather_w2,
        MAT_GATHER_W4 = mat_gather_w4,
        MAT_GATHER_W8 = mat_gather_w8,
        MAT_GATHER_W16 = mat_gather_w16,
        MAT_DICT_TILE_BYTES_K1_O32 = mat_dict_tile_bytes_k1_o32,
        MAT_DICT_TILE_BYTES_K1_O64 = mat_dict_tile_bytes_k1_o64,
        MAT_DICT_TILE_BYTES_K2_O32 = mat_dict_tile_bytes_k2_o32,
        MAT_DICT_TILE_BYTES_K2_O64 = mat_dict_tile_bytes_k2_o64,
        MAT_DICT_OFFSETS_K1_O32 = mat_dict_offsets_k1_o32,
        MAT_DICT_OFFSETS_K1_O64 = mat_dict_offsets_k1_o64,
        MAT_DICT_OFFSETS_K2_O32 = mat_dict_offsets_k2_o32,
        MAT_DICT_OFFSETS_K2_O64 = mat_dict_offsets_k2_o64,
        MAT_DICT_BYTES_K1_O32 = mat_dict_bytes_k1_o32,
        MAT_DICT_BYTES_K1_O64 = mat_dict_bytes_k1_o64,
        MAT_DICT_BYTES_K2_O32 = mat_dict_bytes_k2_o32,
        MAT_DICT_BYTES_K2_O64 = mat_dict_bytes_k2_o64,
    }
    Verify {
        VERIFY_W16 = verify_w16,
        VERIFY_BOOL = verify_bool,
        VERIFY_STR32 = verify_str32,
        VERIFY_STR64 = verify_str64,
        VERIFY_W1 = verify_w1,
        VERIFY_W2 = verify_w2,
        VERIFY_W4 = verify_w4,
        VERIFY_W8 = verify_w8,
    }
    Join {
        NPJ_INSERT_K32 = npj_insert_k32,
        NPJ_INSERT_K64 = npj_insert_k64,
        NPJ_FILL = npj_fill,
        NPJ_PACK_K32 = npj_pack_k32,
        NPJ_PACK_K64 = npj_pack_k64,
        NPJ_PROBE_K32 = npj_probe_k32,
        NPJ_PROBE_K64 = npj_probe_k64,
        WINDOW_BOUNDS = window_bounds,
        CSR_EXPAND = csr_expand,
        SMJ_BOUNDS_K32 = smj_bounds_k32,
        SMJ_BOUNDS_K64 = smj_bounds_k64,
        PHJ_COUNT_K32 = phj_count_k32,
        PHJ_COUNT_K64 = phj_count_k64,
        PHJ_WRITE_K32 = phj_write_k32,
        PHJ_WRITE_K64 = phj_write_k64,
    }
    Groupby {
        GB_INSERT_K32 = gb_insert_k32,
        GB_INSERT_K64 = gb_insert_k64,
        GB_MASK_K64 = gb_mask_k64,
        GB_OCCUPIED = gb_occupied,
        GB_DENSE = gb_dense,
        GB_ASSIGN = gb_assign,
        GB_SMALL_K32 = gb_small_k32,
        GB_SMALL_K64 = gb_small_k64,
        GB_RUN_STARTS_K32 = gb_run_starts_k32,
        GB_RUN_STARTS_K64 = gb_run_starts_k64,
        GB_SCATTER_RUNS = gb_scatter_runs,
        GB_ADJACENT = gb_adjacent,
        GB_COLLISIONS = gb_collisions,
        GP_IDS_K32 = gp_ids_k32,
        GP_IDS_K64 = gp_ids_k64,
        GP_FINISH = gp_finish,
        GP_LARGEST = gp_largest,
        AGG_NARROW = agg_narrow,
        AGG_VALIDITY = agg_validity,
        DC_LIST_ROWS = dc_list_rows,
        DC_KEEP = dc_keep,
        DC_COUNT = dc_count,
        DC_SCATTER = dc_scatter,
        GB_SMALL_W1_K32 = gb_small_w1_k32,
        GB_SMALL_W2_K32 = gb_small_w2_k32,
        GB_SMALL_W4_K32 = gb_small_w4_k32,
        GB_SMALL_W1_K64 = gb_small_w1_k64,
        GB_SMALL_W2_K64 = gb_small_w2_k64,
        GB_SMALL_W4_K64 = gb_small_w4_k64,
        GB_SMALL_W8_K64 = gb_small_w8_k64,
        AGG_COUNT = agg_count,
        AGG_COUNT_INIT = agg_count_init,
        AGG_SUM_I64 = agg_sum_i64,
        AGG_SUM_I64_INIT = agg_sum_i64_init,
        AGG_SUM_U64 = agg_sum_u64,
        AGG_SUM_U64_INIT = agg_sum_u64_init,
        AGG_SUM_F64 = agg_sum_f64,
        AGG_SUM_F64_INIT = agg_sum_f64_init,
        AGG_SUM_I128 = agg_sum_i128,
        AGG_SUM_I128_INIT = agg_sum_i128_init,
        AGG_MIN_I64 = agg_min_i64,
        AGG_MIN_I64_INIT = agg_min_i64_init,
        AGG_MAX_I64 = agg_max_i64,
        AGG_MAX_I64_INIT = agg_max_i64_init,
        AGG_MIN_U64 = agg_min_u64,
        AGG_MIN_U64_INIT = agg_min_u64_init,
        AGG_MAX_U64 = agg_max_u64,
        AGG_MAX_U64_INIT = agg_max_u64_init,
        AGG_MIN_I128_HI = agg_min_i128_hi,
        AGG_MIN_I128_HI_INIT = agg_min_i128_hi_init,
        AGG_MIN_I128_LO = agg_min_i128_lo,
        AGG_MIN_I128_LO_INIT = agg_min_i128_lo_init,
        AGG_MAX_I128_HI = agg_max_i128_hi,
        AGG_MAX_I128_HI_INIT = agg_max_i128_hi_init,
        AGG_MAX_I128_LO = agg_max_i128_lo,
        AGG_MAX_I128_LO_INIT = agg_max_i128_lo_init,
    }
    Spill {
        SPILL_PART_K32 = spill_part_k32,
        SPILL_PART_K64 = spill_part_k64,
        CONCAT_BITS = concat_bits,
        CONCAT_OFFSETS_I32 = concat_offsets_i32,
        CONCAT_OFFSETS_I64 = concat_offsets_i64,
    }
}

per_key_word! {
    RADIX_BOUNDARIES = RADIX_BOUNDARIES_K32, RADIX_BOUNDARIES_K64;
    NPJ_INSERT = NPJ_INSERT_K32, NPJ_INSERT_K64;
    NPJ_PACK = NPJ_PACK_K32, NPJ_PACK_K64;
    NPJ_PROBE = NPJ_PROBE_K32, NPJ_PROBE_K64;
    SMJ_BOUNDS = SMJ_BOUNDS_K32, SMJ_BOUNDS_K64;
    PHJ_COUNT = PHJ_COUNT_K32, PHJ_COUNT_K64;
    PHJ_WRITE = PHJ_WRITE_K32, PHJ_WRITE_K64;
    GB_INSERT = GB_INSERT_K32, GB_INSERT_K64;
    GB_SMALL = GB_SMALL_K32, GB_SMALL_K64;
    GB_RUN_STARTS = GB_RUN_STARTS_K32, GB_RUN_STARTS_K64;
    GP_IDS = GP_IDS_K32, GP_IDS_K64;
    GB_SMALL_W1 = GB_SMALL_W1_K32, GB_SMALL_W1_K64;
    GB_SMALL_W2 = GB_SMALL_W2_K32, GB_SMALL_W2_K64;
    GB_SMALL_W4 = GB_SMALL_W4_K32, GB_SMALL_W4_K64;
    SPILL_PART = SPILL_PART_K32, SPILL_PART_K64;
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    /// The source without `//` comments.
    fn code(source: &str) -> String {
        source.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
    }

    fn identifier_at(s: &str) -> &str {
        let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
        &s[..end]
    }

    /// The names after each `__global__ void [__launch_bounds__(..)]` of `code`.
    fn defined(code: &str) -> Vec<String> {
        code.match_indices("__global__")
            .filter_map(|(at, _)| {
                let rest = code[at + "__global__".len()..].trim_start().strip_prefix("void")?.trim_start();
                let rest = match rest.strip_prefix("__launch_bounds__") {
                    Some(r) => r[r.find(')')? + 1..].trim_start(),
                    None => rest,
                };
                Some(identifier_at(rest).to_string())
            })
            .collect()
    }

    /// Every kernel a source defines: written out, or instantiated from a `#define` whose
    /// parameters name kernels.
    fn kernels_of(source: &str) -> BTreeSet<String> {
        let code = code(source);
        let mut macros: HashMap<String, (Vec<String>, String)> = HashMap::new();
        let mut plain = String::new();
        let mut lines = code.lines();
        while let Some(line) = lines.next() {
            if let Some(def) = line.trim_start().strip_prefix("#define ") {
                // The `#define` line and its continuation lines, without the backslashes.
                let mut body = String::new();
                let mut part = line;
                loop {
                    let continued = part.trim_end().strip_suffix('\\');
                    body.push_str(continued.unwrap_or(part));
                    body.push(' ');
                    match continued {
                        Some(_) => part = lines.next().unwrap_or(""),
                        None => break,
                    }
                }
                let name = identifier_at(def).to_string();
                if let Some(params) = def[name.len()..].strip_prefix('(') {
                    let params = params[..params.find(')').unwrap()].split(',').map(|p| p.trim().to_string()).collect();
                    macros.insert(name, (params, body));
                }
            } else {
                plain.push_str(line);
                plain.push('\n');
            }
        }
        let mut out: BTreeSet<String> = defined(&plain).into_iter().filter(|n| !macros.contains_key(n)).collect();
        for line in plain.lines() {
            let name = identifier_at(line);
            let Some((params, body)) = macros.get(name) else { continue };
            let Some(args) = line[name.len()..].strip_prefix('(') else { continue };
            let args: Vec<&str> = args[..args.rfind(')').unwrap()].split(',').map(str::trim).collect();
            for kernel_param in defined(body) {
                if let Some(i) = params.iter().position(|p| *p == kernel_param) {
                    out.insert(args[i].to_string());
                }
            }
        }
        out
    }

    /// The catalogue and the sources agree: every declared kernel is defined in its module, and
    /// every kernel a module defines is declared once.
    #[test]
    fn every_kernel_is_declared_in_its_module() {
        let mut seen = BTreeSet::new();
        for k in ALL {
            assert!(seen.insert((k.module.name(), k.name)), "{k} is declared twice");
        }
        for module in Module::ALL {
            let defined = kernels_of(module.source());
            assert!(!defined.is_empty(), "no kernel found in kernels/{}.cu", module.name());
            let declared: BTreeSet<String> =
                ALL.iter().filter(|k| k.module == module).map(|k| k.name.to_string()).collect();
            assert_eq!(declared, defined, "kernels/{}.cu: declared (left) and defined (right) differ", module.name());
        }
    }
}
