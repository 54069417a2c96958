"""What {{name}} computes, in plain Python (no bindings, no I/O).

`input` has the shape of the world's `input` record: `.observations`, each
with `.cells` (`.dimension`, `.value`, `.count`) and the other fields.
"""

PPM = 1_000_000
S64_MAX = 2**63 - 1


class Refused(Exception):
    """The tool's own refusal: the run's failure reason, shown to the agent."""


def interpret(input):
    """Each cell's count and its share of its dimension, in parts per million."""
    if not input.observations:
        raise Refused("no observations")
    rows = []
    for observation in input.observations:
        totals = {}
        for cell in observation.cells:
            totals[cell.dimension] = totals.get(cell.dimension, 0) + cell.count
        for cell in observation.cells:
            total = totals[cell.dimension]
            share = cell.count * PPM // total if total else 0
            rows.append((f"{cell.dimension}={cell.value}", [min(cell.count, S64_MAX), min(share, S64_MAX)]))
    metrics = [("observations", len(input.observations))]
    return metrics, ["count", "share_ppm"], rows
