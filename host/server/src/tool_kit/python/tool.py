"""{{name}}: an interpretation tool (anchor:tool@1.0.0, world `tool`), for componentize-py.

The figures are computed by `interpret` in figures.py, plain Python that the
tool's own test runs without the bindings; this file adapts it to the world.
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports.types import Input, Metric, Report, Row

import figures


class WitWorld(wit_world.WitWorld):
    def run(self, input: Input) -> Report:
        try:
            metrics, columns, rows = figures.interpret(input)
        except figures.Refused as refused:
            raise Err(str(refused))
        return Report(
            metrics=[Metric(name=name, value=value, scale=0) for name, value in metrics],
            columns=columns,
            rows=[Row(label=label, values=values) for label, values in rows],
        )
