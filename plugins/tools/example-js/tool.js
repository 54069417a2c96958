// An example TSL interpretation tool (world `tool` of anchor:tool@1.0.0).
//
// A pure function: no clock, no randomness, no I/O. The Rust example computes
// the very same report; both must give identical output for the same input.
//
// How ComponentizeJS 0.23.0 maps this world (read off its generated bindings):
// - a record is an object with lowerCamelCase fields (`resolutionLevel`);
// - u64/s64 arrive and must leave as BigInt; s32/u8 as Number;
// - an enum case is its kebab-case name as a string;
// - an option<T> is the value, or undefined when absent;
// - a list<T> is an Array;
// - `run` returns the `ok` payload; throwing a value that is not an Error
//   makes the result `err(value)` (here a string); a thrown Error traps.
//
// Edge cases the Rust version must match: totals and products are exact
// (u128 in Rust), a metric's value is wrapped to s64 (the bindings lower an
// s64 with BigInt.asIntN(64, ...)), and a row value outside s64 (a count over
// 2^63 - 1) fails the bindings' range check, which traps the run.

const PPM = 1_000_000n;

/** Wraps to s64, as the bindings would (two's complement). */
const s64 = (value) => BigInt.asIntN(64, value);

/**
 * @param {{ today: number, observations: Array<{
 *   kind: string, resolutionLevel: number, subjectAgent?: string,
 *   firstDay: number, lastDay: number, agents?: bigint, declarations?: bigint,
 *   cells: Array<{ dimension: string, value: string, count: bigint }>,
 *   series: Array<{ day: number, dimension: string, value: string, count: bigint }>,
 * }> }} input
 */
export function run(input) {
  const observations = input.observations;
  if (observations.length === 0) {
    throw 'no observations';
  }

  const rows = [];
  let cells = 0n;
  let agents = 0n;
  let seriesTotal = 0n;
  const days = new Set();

  for (const observation of observations) {
    // The total of each dimension over this observation's cells.
    const totals = new Map();
    for (const cell of observation.cells) {
      totals.set(cell.dimension, (totals.get(cell.dimension) ?? 0n) + cell.count);
    }
    for (const cell of observation.cells) {
      const total = totals.get(cell.dimension);
      const sharePpm = total === 0n ? 0n : (cell.count * PPM) / total;
      rows.push({
        label: `${observation.kind}:${cell.dimension}=${cell.value}`,
        values: [cell.count, sharePpm],
      });
    }
    cells += BigInt(observation.cells.length);
    if (observation.agents !== undefined && observation.agents !== null) {
      agents += observation.agents;
    }
    for (const entry of observation.series) {
      seriesTotal += entry.count;
      days.add(entry.day);
    }
  }

  return {
    metrics: [
      { name: 'observations', value: BigInt(observations.length), scale: 0 },
      { name: 'cells', value: cells, scale: 0 },
      { name: 'agents', value: s64(agents), scale: 0 },
      { name: 'series_total', value: s64(seriesTotal), scale: 0 },
      { name: 'days', value: BigInt(days.size), scale: 0 },
    ],
    columns: ['count', 'share_ppm'],
    rows,
  };
}
