// The tool's own test, offline: `run` on observations.json, as the bindings pass it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { run } from './tool.js';

/** observations.json (the service's JSON) in the shape ComponentizeJS passes. */
function asBindings(input) {
  const big = (n) => (n === undefined || n === null ? undefined : BigInt(n));
  return {
    today: input.today,
    observations: input.observations.map((o) => ({
      kind: o.kind.replaceAll('_', '-'),
      resolutionLevel: o.resolution_level,
      subjectAgent: o.subject_agent ?? undefined,
      firstDay: o.first_day,
      lastDay: o.last_day,
      agents: big(o.agents),
      declarations: big(o.declarations),
      cells: (o.cells ?? []).map((c) => ({ ...c, count: BigInt(c.count) })),
      series: (o.series ?? []).map((s) => ({ ...s, count: BigInt(s.count) })),
    })),
  };
}

test('shares of the sample observation', () => {
  const input = asBindings(JSON.parse(readFileSync(new URL('./observations.json', import.meta.url))));
  const report = run(input);
  assert.equal(report.rows[0].label, 'action_type=execute');
  assert.deepEqual(report.rows[0].values, [30n, 750000n]);
  assert.deepEqual(report.rows[1].values, [10n, 250000n]);
  assert.equal(report.metrics[0].value, 1n);
  assert.throws(() => run({ today: 0, observations: [] }), (e) => e === 'no observations');
});
