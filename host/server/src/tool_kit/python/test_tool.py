"""The tool's own test, offline: `python -m unittest`."""

import json
import pathlib
import unittest
from types import SimpleNamespace

import figures


def as_records(value):
    """observations.json with attribute access, as the bindings' records have."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: as_records(v) for k, v in value.items()})
    if isinstance(value, list):
        return [as_records(v) for v in value]
    return value


class SampleObservation(unittest.TestCase):
    def test_shares(self):
        data = json.loads((pathlib.Path(__file__).parent / "observations.json").read_text())
        metrics, columns, rows = figures.interpret(as_records(data))
        self.assertEqual(columns, ["count", "share_ppm"])
        self.assertEqual(rows[0], ("action_type=execute", [30, 750_000]))
        self.assertEqual(rows[1], ("action_type=hold", [10, 250_000]))
        self.assertEqual(metrics, [("observations", 1)])

    def test_no_observations_is_refused(self):
        with self.assertRaises(figures.Refused):
            figures.interpret(SimpleNamespace(today=0, observations=[]))


if __name__ == "__main__":
    unittest.main()
