"""An example TSL interpretation tool in Python (world `tool` of anchor:tool@1.0.0).

A pure function: no clock, no randomness, no I/O. The Rust and JavaScript
examples compute the very same report; all three must give identical output
for the same input. Built into a component by componentize-py (build.sh).

Edge cases the Rust version sets: shares are exact integer arithmetic (u128
in Rust, Python ints here); a row value over 2^63 - 1 is held at 2^63 - 1;
the `agents` and `series_total` metrics add with u64 wrap-around and are
then read as s64, two's complement.
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports.types import Input, Metric, Report, Row

PPM = 1_000_000
S64_MAX = 2**63 - 1
U64 = 2**64


def kind_name(kind) -> str:
    """The kind's interface name: ENVIRONMENT_SUMMARY -> environment-summary."""
    return kind.name.lower().replace("_", "-")


def as_s64(n: int) -> int:
    """A u64 read as s64, two's complement."""
    n %= U64
    return n - U64 if n > S64_MAX else n


def interpret(input: Input) -> Report:
    if not input.observations:
        raise Err("no observations")
    rows = []
    cells = agents = series_total = 0
    days = set()
    for observation in input.observations:
        totals: dict[str, int] = {}
        for cell in observation.cells:
            totals[cell.dimension] = totals.get(cell.dimension, 0) + cell.count
        for cell in observation.cells:
            total = totals[cell.dimension]
            share = cell.count * PPM // total if total else 0
            rows.append(
                Row(
                    label=f"{kind_name(observation.kind)}:{cell.dimension}={cell.value}",
                    values=[min(cell.count, S64_MAX), min(share, S64_MAX)],
                )
            )
        cells += len(observation.cells)
        agents = (agents + (observation.agents or 0)) % U64
        for point in observation.series:
            series_total = (series_total + point.count) % U64
            days.add(point.day)
    return Report(
        metrics=[
            Metric(name="observations", value=len(input.observations), scale=0),
            Metric(name="cells", value=as_s64(cells), scale=0),
            Metric(name="agents", value=as_s64(agents), scale=0),
            Metric(name="series_total", value=as_s64(series_total), scale=0),
            Metric(name="days", value=len(days), scale=0),
        ],
        columns=["count", "share_ppm"],
        rows=rows,
    )


class WitWorld(wit_world.WitWorld):
    def run(self, input: Input) -> Report:
        return interpret(input)
