"""Each query's time beside DuckDB's, from two records of one device run: the runner's JSON
(`bench tpch|ssb --out DIR`) and duckdb-peer.py's. Prints DuckDB ms, GPU ms, the ratio (above 1:
the GPU path is faster), the floor and whether the answer matched, then the geometric mean, the
queries slower than DuckDB and both totals.
   usage: python3 scripts/beside-duckdb.py RUNNER.json DUCKDB.json"""
import json, math, sys

runner, duck = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
gpu = {q["query"]: q for q in runner["queries"]}
ratios, slower = [], []
for d in duck["queries"]:
    name, g = d["query"], gpu.get(d["query"], {})
    if not (g.get("gpu_ms") and d.get("ms")):
        print(f"  {name:<6} missing in one record")
        continue
    r = d["ms"] / g["gpu_ms"]
    ratios.append(r)
    if r < 1:
        slower.append(f"{name} {r:.2f}x")
    print(f"  {name:<6}{d['ms']:8.1f}{g['gpu_ms']:8.1f} {r:6.2f}x floor {g.get('floor_ms') or 0:7.3f} {g.get('ok')}")
if ratios:
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    total_gpu = sum(q.get("gpu_ms") or 0 for q in gpu.values())
    total_duck = sum(q.get("ms") or 0 for q in duck["queries"])
    print(f"  geomean {geo:.2f}x over {len(ratios)}; slower: {', '.join(slower) or 'none'}; "
          f"GPU total {total_gpu:.0f} ms, DuckDB {total_duck:.0f} ms")
