// {{name}}: an interpretation tool (anchor:tool@1.0.0, world `tool`).
//
// How ComponentizeJS maps the world: records are objects with lowerCamelCase
// fields; u64 and s64 are BigInt, s32 and u8 Number; an enum case is its
// kebab-case name; an absent option is undefined; throwing a string makes
// the run's result err(string).

const PPM = 1_000_000n;
const S64_MAX = 2n ** 63n - 1n;
const s64 = (n) => (n > S64_MAX ? S64_MAX : n);

/** Each cell's count and its share of its dimension, in parts per million. */
export function run(input) {
  if (input.observations.length === 0) {
    throw 'no observations';
  }
  const rows = [];
  for (const observation of input.observations) {
    const totals = new Map();
    for (const cell of observation.cells) {
      totals.set(cell.dimension, (totals.get(cell.dimension) ?? 0n) + cell.count);
    }
    for (const cell of observation.cells) {
      const total = totals.get(cell.dimension);
      const share = total === 0n ? 0n : (cell.count * PPM) / total;
      rows.push({ label: `${cell.dimension}=${cell.value}`, values: [s64(cell.count), s64(share)] });
    }
  }
  return {
    metrics: [{ name: 'observations', value: BigInt(input.observations.length), scale: 0 }],
    columns: ['count', 'share_ppm'],
    rows,
  };
}
