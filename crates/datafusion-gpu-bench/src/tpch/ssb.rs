//! Star Schema Benchmark data (O'Neil, O'Neil and Chen, "Star Schema Benchmark", rev. 3): the
//! `lineorder` fact table and the `customer`, `supplier`, `part` and `date` dimensions, generated
//! in memory at any scale factor, deterministic for a given seed.
//!
//! Sizes follow the specification: `customer` 30,000 × SF rows, `supplier` 2,000 × SF, `part`
//! 200,000 × (1 + ⌊log2 SF⌋) (scaled linearly below SF 1), `date` every day of 1992–1998, and
//! `lineorder` 1,500,000 × SF orders of 1 to 7 lines each (about 6,000,000 × SF rows). Values
//! follow the dbgen rules the queries depend on: cities are the first nine letters of the nation
//! and a digit (`UNITED KI1`), `p_category` is `p_mfgr` and a digit (`MFGR#12`), `p_brand1` the
//! category and a number 1–40 (`MFGR#1221`), prices in cents, `lo_revenue` the discounted price,
//! `lo_supplycost` 60% of the part's retail price, dates as `yyyymmdd` integers.
//!
//! Rows are generated in fixed-size chunks, each from its own random stream seeded by (seed,
//! table, chunk): the data depends on the seed and scale factor only, not on the thread count.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::data::{Progress, Table};

/// Rows (orders, for `lineorder`) per generated chunk.
const CHUNK: usize = 65_536;

pub const NATIONS: [(&str, &str); 25] = [
    ("ALGERIA", "AFRICA"),
    ("ARGENTINA", "AMERICA"),
    ("BRAZIL", "AMERICA"),
    ("CANADA", "AMERICA"),
    ("EGYPT", "MIDDLE EAST"),
    ("ETHIOPIA", "AFRICA"),
    ("FRANCE", "EUROPE"),
    ("GERMANY", "EUROPE"),
    ("INDIA", "ASIA"),
    ("INDONESIA", "ASIA"),
    ("IRAN", "MIDDLE EAST"),
    ("IRAQ", "MIDDLE EAST"),
    ("JAPAN", "ASIA"),
    ("JORDAN", "MIDDLE EAST"),
    ("KENYA", "AFRICA"),
    ("MOROCCO", "AFRICA"),
    ("MOZAMBIQUE", "AFRICA"),
    ("PERU", "AMERICA"),
    ("CHINA", "ASIA"),
    ("ROMANIA", "EUROPE"),
    ("SAUDI ARABIA", "MIDDLE EAST"),
    ("VIETNAM", "ASIA"),
    ("RUSSIA", "EUROPE"),
    ("UNITED KINGDOM", "EUROPE"),
    ("UNITED STATES", "AMERICA"),
];

const SEGMENTS: [&str; 5] = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"];
const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECI", "5-LOW"];
const SHIP_MODES: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];
const COLORS: [&str; 92] = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
];
const TYPE_1: [&str; 6] = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"];
const TYPE_2: [&str; 5] = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"];
const TYPE_3: [&str; 5] = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"];
const CONTAINER_1: [&str; 5] = ["SM", "LG", "MED", "JUMBO", "WRAP"];
const CONTAINER_2: [&str; 8] = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Row counts of the five tables at scale factor `sf` (`lineorder`: orders, not lines).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SsbSizes {
    pub customers: usize,
    pub suppliers: usize,
    pub parts: usize,
    pub orders: usize,
}

impl SsbSizes {
    pub fn new(sf: f64) -> SsbSizes {
        let scaled = |base: f64| ((base * sf).round() as usize).max(1);
        let parts = if sf >= 1.0 { 200_000 * (1 + sf.log2().floor() as usize) } else { scaled(200_000.0) };
        SsbSizes { customers: scaled(30_000.0), suppliers: scaled(2_000.0), parts, orders: scaled(1_500_000.0) }
    }
}

/// A calendar day of the `date` table.
#[derive(Debug, Clone, Copy)]
struct Day {
    year: i32,
    month: u32,       // 1..=12
    day: u32,         // 1..=31
    weekday: u32,     // 0 = Sunday
    day_of_year: u32, // 1-based
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Every day from 1992-01-01 to 1998-12-31, made once.
fn calendar() -> &'static [Day] {
    static DAYS: std::sync::OnceLock<Vec<Day>> = std::sync::OnceLock::new();
    DAYS.get_or_init(days_1992_to_1998)
}

/// Every day from 1992-01-01 to 1998-12-31 (1992-01-01 was a Wednesday).
fn days_1992_to_1998() -> Vec<Day> {
    let mut out = Vec::with_capacity(2557);
    let mut weekday = 3;
    for year in 1992..=1998 {
        let mut day_of_year = 1;
        for month in 1..=12 {
            for day in 1..=days_in_month(year, month) {
                out.push(Day { year, month, day, weekday, day_of_year });
                weekday = (weekday + 1) % 7;
                day_of_year += 1;
            }
        }
    }
    out
}

fn datekey(d: &Day) -> i32 {
    d.year * 10_000 + d.month as i32 * 100 + d.day as i32
}

fn nullable(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(fields.iter().map(|(n, t)| Field::new(*n, t.clone(), false)).collect::<Vec<_>>()))
}

fn rng_for(seed: u64, table: u64, chunk: usize) -> StdRng {
    StdRng::seed_from_u64(
        seed ^ table.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (chunk as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

fn alnum(rng: &mut StdRng, min: usize, max: usize) -> String {
    const CHARS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,. ";
    let len = rng.random_range(min..=max);
    (0..len).map(|_| CHARS[rng.random_range(0..CHARS.len())] as char).collect()
}

fn phone(rng: &mut StdRng, nation: usize) -> String {
    format!(
        "{}-{:03}-{:03}-{:04}",
        nation + 10,
        rng.random_range(100..1000),
        rng.random_range(100..1000),
        rng.random_range(1000..10_000)
    )
}

fn city(rng: &mut StdRng, nation: usize) -> String {
    format!("{:<9.9}{}", NATIONS[nation].0, rng.random_range(0..10))
}

fn strings(v: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

/// Retail price in cents of part `p`, as TPC-H's dbgen computes it.
fn retail_price(p: i64) -> i64 {
    90_000 + (p / 10) % 20_001 + 100 * (p % 1_000)
}

/// Generates chunks `0..chunks` in parallel with `make(chunk) -> batch` and deals them to
/// `partitions` partitions in chunk order.
fn chunked(
    chunks: usize,
    partitions: usize,
    progress: &Progress,
    make: impl Fn(usize) -> Result<RecordBatch> + Sync,
) -> Result<Vec<Vec<RecordBatch>>> {
    let batches: Vec<Vec<RecordBatch>> = (0..chunks)
        .into_par_iter()
        .map(|c| {
            let b = make(c)?;
            progress.inc(b.num_rows() as u64);
            Ok(vec![b])
        })
        .collect::<Result<_>>()?;
    Ok(super::data::deal(batches, partitions))
}

/// The keys of chunk `c` of a table of `n` rows: `c * CHUNK + 1 ..= min((c + 1) * CHUNK, n)`.
fn chunk_keys(c: usize, n: usize) -> Vec<i32> {
    ((c * CHUNK + 1)..=((c + 1) * CHUNK).min(n)).map(|k| k as i32).collect()
}

/// The columns `customer` and `supplier` share, for one chunk: key, name (`<label>#<key>`),
/// address, city, nation, region and phone, drawn in that order from `rng`.
fn party_columns(rng: &mut StdRng, keys: Vec<i32>, label: &str) -> Vec<ArrayRef> {
    let nations: Vec<usize> = keys.iter().map(|_| rng.random_range(0..25)).collect();
    let names = strings(keys.iter().map(|k| format!("{label}#{k:09}")).collect());
    let addresses = strings(keys.iter().map(|_| alnum(rng, 10, 25)).collect());
    vec![
        Arc::new(Int32Array::from(keys)),
        names,
        addresses,
        strings(nations.iter().map(|&n| city(rng, n)).collect()),
        strings(nations.iter().map(|&n| NATIONS[n].0.to_string()).collect()),
        strings(nations.iter().map(|&n| NATIONS[n].1.to_string()).collect()),
        strings(nations.iter().map(|&n| phone(rng, n)).collect()),
    ]
}

fn customer(sizes: &SsbSizes, seed: u64, partitions: usize, progress: &Progress) -> Result<Table> {
    let schema = nullable(&[
        ("c_custkey", DataType::Int32),
        ("c_name", DataType::Utf8),
        ("c_address", DataType::Utf8),
        ("c_city", DataType::Utf8),
        ("c_nation", DataType::Utf8),
        ("c_region", DataType::Utf8),
        ("c_phone", DataType::Utf8),
        ("c_mktsegment", DataType::Utf8),
    ]);
    let n = sizes.customers;
    let s = Arc::clone(&schema);
    let parts = chunked(n.div_ceil(CHUNK), partitions, progress, |c| {
        let mut rng = rng_for(seed, 1, c);
        let keys = chunk_keys(c, n);
        let len = keys.len();
        let mut cols = party_columns(&mut rng, keys, "Customer");
        cols.push(strings((0..len).map(|_| SEGMENTS[rng.random_range(0..5)].to_string()).collect()));
        Ok(RecordBatch::try_new(Arc::clone(&s), cols)?)
    })?;
    Ok(Table { name: "customer", schema, partitions: parts })
}

fn supplier(sizes: &SsbSizes, seed: u64, partitions: usize, progress: &Progress) -> Result<Table> {
    let schema = nullable(&[
        ("s_suppkey", DataType::Int32),
        ("s_name", DataType::Utf8),
        ("s_address", DataType::Utf8),
        ("s_city", DataType::Utf8),
        ("s_nation", DataType::Utf8),
        ("s_region", DataType::Utf8),
        ("s_phone", DataType::Utf8),
    ]);
    let n = sizes.suppliers;
    let s = Arc::clone(&schema);
    let parts = chunked(n.div_ceil(CHUNK), partitions, progress, |c| {
        let mut rng = rng_for(seed, 2, c);
        let cols = party_columns(&mut rng, chunk_keys(c, n), "Supplier");
        Ok(RecordBatch::try_new(Arc::clone(&s), cols)?)
    })?;
    Ok(Table { name: "supplier", schema, partitions: parts })
}

fn part(sizes: &SsbSizes, seed: u64, partitions: usize, progress: &Progress) -> Result<Table> {
    let schema = nullable(&[
        ("p_partkey", DataType::Int32),
        ("p_name", DataType::Utf8),
        ("p_mfgr", DataType::Utf8),
        ("p_category", DataType::Utf8),
        ("p_brand1", DataType::Utf8),
        ("p_color", DataType::Utf8),
        ("p_type", DataType::Utf8),
        ("p_size", DataType::Int32),
        ("p_container", DataType::Utf8),
    ]);
    let n = sizes.parts;
    let s = Arc::clone(&schema);
    let parts = chunked(n.div_ceil(CHUNK), partitions, progress, |c| {
        let mut rng = rng_for(seed, 3, c);
        let keys = chunk_keys(c, n);
        let len = keys.len();
        let (mut name, mut mfgr, mut category, mut brand, mut color, mut ty, mut size, mut container) = (
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
            Vec::with_capacity(len),
        );
        for _ in 0..len {
            let (a, b) = (rng.random_range(0..COLORS.len()), rng.random_range(0..COLORS.len()));
            name.push(format!("{} {}", COLORS[a], COLORS[b]));
            let m = rng.random_range(1..=5);
            let cat = rng.random_range(1..=5);
            mfgr.push(format!("MFGR#{m}"));
            category.push(format!("MFGR#{m}{cat}"));
            brand.push(format!("MFGR#{m}{cat}{}", rng.random_range(1..=40)));
            color.push(COLORS[rng.random_range(0..COLORS.len())].to_string());
            ty.push(format!(
                "{} {} {}",
                TYPE_1[rng.random_range(0..6)],
                TYPE_2[rng.random_range(0..5)],
                TYPE_3[rng.random_range(0..5)]
            ));
            size.push(rng.random_range(1..=50));
            container.push(format!("{} {}", CONTAINER_1[rng.random_range(0..5)], CONTAINER_2[rng.random_range(0..8)]));
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(keys)),
            strings(name),
            strings(mfgr),
            strings(category),
            strings(brand),
            strings(color),
            strings(ty),
            Arc::new(Int32Array::from(size)),
            strings(container),
        ];
        Ok(RecordBatch::try_new(Arc::clone(&s), cols)?)
    })?;
    Ok(Table { name: "part", schema, partitions: parts })
}

fn date(progress: &Progress) -> Result<Table> {
    let schema = nullable(&[
        ("d_datekey", DataType::Int32),
        ("d_date", DataType::Utf8),
        ("d_dayofweek", DataType::Utf8),
        ("d_month", DataType::Utf8),
        ("d_year", DataType::Int32),
        ("d_yearmonthnum", DataType::Int32),
        ("d_yearmonth", DataType::Utf8),
        ("d_daynuminweek", DataType::Int32),
        ("d_daynuminmonth", DataType::Int32),
        ("d_daynuminyear", DataType::Int32),
        ("d_monthnuminyear", DataType::Int32),
        ("d_weeknuminyear", DataType::Int32),
        ("d_sellingseason", DataType::Utf8),
        ("d_lastdayinweekfl", DataType::Int32),
        ("d_lastdayinmonthfl", DataType::Int32),
        ("d_holidayfl", DataType::Int32),
        ("d_weekdayfl", DataType::Int32),
    ]);
    let days = calendar();
    let int = |f: &dyn Fn(&Day) -> i32| -> ArrayRef { Arc::new(Int32Array::from_iter_values(days.iter().map(f))) };
    let text = |f: &dyn Fn(&Day) -> String| -> ArrayRef { strings(days.iter().map(f).collect()) };
    let season = |d: &Day| match d.month {
        12 => "Christmas",
        1 | 2 => "Winter",
        3..=5 => "Spring",
        6..=8 => "Summer",
        _ => "Fall",
    };
    // Fixed-date holidays of the US calendar the generator's flag stands for.
    let holiday = |d: &Day| matches!((d.month, d.day), (1, 1) | (7, 4) | (11, 11) | (12, 24) | (12, 25) | (12, 31));
    let cols: Vec<ArrayRef> = vec![
        int(&datekey),
        text(&|d| format!("{} {}, {}", MONTHS[d.month as usize - 1], d.day, d.year)),
        text(&|d| WEEKDAYS[d.weekday as usize].to_string()),
        text(&|d| MONTHS[d.month as usize - 1].to_string()),
        int(&|d| d.year),
        int(&|d| d.year * 100 + d.month as i32),
        text(&|d| format!("{}{}", &MONTHS[d.month as usize - 1][..3], d.year)),
        int(&|d| d.weekday as i32 + 1),
        int(&|d| d.day as i32),
        int(&|d| d.day_of_year as i32),
        int(&|d| d.month as i32),
        int(&|d| (d.day_of_year as i32 - 1) / 7 + 1),
        text(&|d| season(d).to_string()),
        int(&|d| (d.weekday == 6) as i32),
        int(&|d| (d.day == days_in_month(d.year, d.month)) as i32),
        int(&|d| holiday(d) as i32),
        int(&|d| (1..=5).contains(&d.weekday) as i32),
    ];
    progress.inc(days.len() as u64);
    let batch = RecordBatch::try_new(Arc::clone(&schema), cols)?;
    Ok(Table { name: "date", schema, partitions: vec![vec![batch]] })
}

fn lineorder(sizes: &SsbSizes, seed: u64, partitions: usize, progress: &Progress) -> Result<Table> {
    let schema = lineorder_schema();
    let parts = chunked(lineorder_chunks(sizes), partitions, progress, |c| lineorder_chunk(sizes, seed, c, &schema))?;
    Ok(Table { name: "lineorder", schema, partitions: parts })
}

/// About how many rows `lineorder` has: four lines an order on average (1 to 7); the progress
/// bars count lines.
pub(super) fn lineorder_rows_estimate(sizes: &SsbSizes) -> usize {
    sizes.orders * 4
}

/// `lineorder`'s chunks: one per [`CHUNK`] orders.
pub(super) fn lineorder_chunks(sizes: &SsbSizes) -> usize {
    sizes.orders.div_ceil(CHUNK)
}

/// `lineorder`'s schema.
pub(super) fn lineorder_schema() -> SchemaRef {
    nullable(&[
        ("lo_orderkey", DataType::Int64),
        ("lo_linenumber", DataType::Int32),
        ("lo_custkey", DataType::Int32),
        ("lo_partkey", DataType::Int32),
        ("lo_suppkey", DataType::Int32),
        ("lo_orderdate", DataType::Int32),
        ("lo_orderpriority", DataType::Utf8),
        ("lo_shippriority", DataType::Utf8),
        ("lo_quantity", DataType::Int32),
        ("lo_extendedprice", DataType::Int64),
        ("lo_ordtotalprice", DataType::Int64),
        ("lo_discount", DataType::Int32),
        ("lo_revenue", DataType::Int64),
        ("lo_supplycost", DataType::Int64),
        ("lo_tax", DataType::Int32),
        ("lo_commitdate", DataType::Int32),
        ("lo_shipmode", DataType::Utf8),
    ])
}

/// Chunk `c` of `lineorder` (the lines of orders `c * CHUNK + 1 ..`), of `schema`
/// ([`lineorder_schema`]): the same rows however the chunks are generated or dealt.
pub(super) fn lineorder_chunk(sizes: &SsbSizes, seed: u64, c: usize, schema: &SchemaRef) -> Result<RecordBatch> {
    let days = calendar();
    // Orders are placed from 1992-01-01 to 151 days before the calendar's end, as in TPC-H.
    let last_order_day = days.len() - 152;
    let n = sizes.orders;
    let mut rng = rng_for(seed, 5, c);
    let (first, last) = (c * CHUNK + 1, ((c + 1) * CHUNK).min(n));
    let cap = (last + 1 - first) * 4;
    let mut orderkey = Vec::with_capacity(cap);
    let mut linenumber = Vec::with_capacity(cap);
    let mut custkey = Vec::with_capacity(cap);
    let mut partkey = Vec::with_capacity(cap);
    let mut suppkey = Vec::with_capacity(cap);
    let mut orderdate = Vec::with_capacity(cap);
    let mut priority = Vec::with_capacity(cap);
    let mut shippriority = Vec::with_capacity(cap);
    let mut quantity = Vec::with_capacity(cap);
    let mut extprice = Vec::with_capacity(cap);
    let mut ordtotal = Vec::with_capacity(cap);
    let mut discount = Vec::with_capacity(cap);
    let mut revenue = Vec::with_capacity(cap);
    let mut supplycost = Vec::with_capacity(cap);
    let mut tax = Vec::with_capacity(cap);
    let mut commitdate = Vec::with_capacity(cap);
    let mut shipmode = Vec::with_capacity(cap);
    for order in first..=last {
        let lines = rng.random_range(1..=7);
        let cust = rng.random_range(1..=sizes.customers) as i32;
        let day = rng.random_range(0..=last_order_day);
        let prio = PRIORITIES[rng.random_range(0..5)];
        let start = orderkey.len();
        let mut total = 0i64;
        for line in 1..=lines {
            let p = rng.random_range(1..=sizes.parts) as i64;
            let q = rng.random_range(1..=50);
            let d = rng.random_range(0..=10);
            let t = rng.random_range(0..=8);
            let price = retail_price(p) * q as i64;
            let rev = price * (100 - d as i64) / 100;
            total += rev * (100 + t as i64) / 100;
            orderkey.push(order as i64);
            linenumber.push(line);
            custkey.push(cust);
            partkey.push(p as i32);
            suppkey.push(rng.random_range(1..=sizes.suppliers) as i32);
            orderdate.push(datekey(&days[day]));
            priority.push(prio);
            shippriority.push("0");
            quantity.push(q);
            extprice.push(price);
            discount.push(d);
            revenue.push(rev);
            supplycost.push(6 * retail_price(p) / 10);
            tax.push(t);
            commitdate.push(datekey(&days[day + rng.random_range(30..=90)]));
            shipmode.push(SHIP_MODES[rng.random_range(0..7)]);
        }
        ordtotal.extend(std::iter::repeat_n(total, orderkey.len() - start));
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(orderkey)),
        Arc::new(Int32Array::from(linenumber)),
        Arc::new(Int32Array::from(custkey)),
        Arc::new(Int32Array::from(partkey)),
        Arc::new(Int32Array::from(suppkey)),
        Arc::new(Int32Array::from(orderdate)),
        Arc::new(StringArray::from(priority)),
        Arc::new(StringArray::from(shippriority)),
        Arc::new(Int32Array::from(quantity)),
        Arc::new(Int64Array::from(extprice)),
        Arc::new(Int64Array::from(ordtotal)),
        Arc::new(Int32Array::from(discount)),
        Arc::new(Int64Array::from(revenue)),
        Arc::new(Int64Array::from(supplycost)),
        Arc::new(Int32Array::from(tax)),
        Arc::new(Int32Array::from(commitdate)),
        Arc::new(StringArray::from(shipmode)),
    ];
    Ok(RecordBatch::try_new(Arc::clone(schema), cols)?)
}

/// The four SSB tables other than `lineorder` at scale factor `sf`, each split into `partitions`
/// partitions (a few million rows at SF100: generated in memory before they are written).
pub fn generate_dimensions(
    sf: f64,
    seed: u64,
    partitions: usize,
    progress: &super::data::Progresses,
) -> Result<Vec<Table>> {
    let sizes = SsbSizes::new(sf);
    let bar = |name: &str, rows: usize| progress.table(name, rows as u64);
    Ok(vec![
        date(&bar("date", calendar().len()))?,
        customer(&sizes, seed, partitions, &bar("customer", sizes.customers))?,
        supplier(&sizes, seed, partitions, &bar("supplier", sizes.suppliers))?,
        part(&sizes, seed, partitions, &bar("part", sizes.parts))?,
    ])
}

/// The five SSB tables at scale factor `sf`, each split into `partitions` partitions.
pub fn generate(sf: f64, seed: u64, partitions: usize, progress: &super::data::Progresses) -> Result<Vec<Table>> {
    let sizes = SsbSizes::new(sf);
    let mut tables = generate_dimensions(sf, seed, partitions, progress)?;
    let bar = progress.table("lineorder", lineorder_rows_estimate(&sizes) as u64);
    tables.push(lineorder(&sizes, seed, partitions, &bar)?);
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_covers_seven_years() {
        let days = calendar();
        assert_eq!(days.len(), 365 * 7 + 2);
        assert_eq!(datekey(&days[0]), 19920101);
        assert_eq!(datekey(days.last().unwrap()), 19981231);
        // 1998-12-31 was a Thursday.
        assert_eq!(days.last().unwrap().weekday, 4);
    }

    fn rows(tables: &[Table]) -> Vec<(String, Vec<RecordBatch>)> {
        tables.iter().map(|t| (t.name.to_string(), t.partitions.iter().flatten().cloned().collect())).collect()
    }

    #[test]
    fn data_depends_on_the_seed_not_the_partitioning() {
        let quiet = super::super::data::Progresses::new(false);
        let a = generate(0.02, 7, 1, &quiet).unwrap();
        let b = generate(0.02, 7, 3, &quiet).unwrap();
        let c = generate(0.02, 8, 1, &quiet).unwrap();
        // Partitions take whole chunks in turn: with 1 or 3 partitions the chunks are the same.
        let sorted = |t: &[Table]| {
            let mut v: Vec<RecordBatch> = Vec::new();
            for table in t {
                let mut chunks: Vec<&RecordBatch> = table.partitions.iter().flatten().collect();
                chunks.sort_by_key(|b| format!("{:?}", b.column(0).slice(0, 1)));
                v.extend(chunks.into_iter().cloned());
            }
            v
        };
        assert_eq!(sorted(&a), sorted(&b));
        assert_ne!(rows(&a), rows(&c));
        let lineorder = a.iter().find(|t| t.name == "lineorder").unwrap();
        let n = lineorder.num_rows();
        // 1 to 7 lines per order, 4 on average.
        let orders = SsbSizes::new(0.02).orders;
        assert!(n > orders * 3 && n < orders * 5, "{n} lines for {orders} orders");
    }

    #[test]
    fn sizes_follow_the_specification() {
        let s = SsbSizes::new(10.0);
        assert_eq!((s.customers, s.suppliers, s.parts, s.orders), (300_000, 20_000, 800_000, 15_000_000));
        let s = SsbSizes::new(1.0);
        assert_eq!(s.parts, 200_000);
        let s = SsbSizes::new(0.01);
        assert_eq!((s.customers, s.suppliers, s.parts, s.orders), (300, 20, 2_000, 15_000));
    }
}
