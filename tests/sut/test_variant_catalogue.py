"""The variant catalogue (tests/variants.py) against the released wheels: every edit of every
variant still applies, exactly once, and leaves code that parses. A variant that no longer
applies would turn its control into an error, or a benchmark's correct variant into nothing."""

import subprocess
import zipfile

from benchmarks.false_alarms import CONTROLS, CORRECT

from tests.variants import FAULTS, RC1_FAILS, make_variant


def test_every_variant_applies_to_the_released_wheel_and_parses(sut_wheelhouse, tmp_path):
    wheels = {w.name: sut_wheelhouse.path / w.file for w in sut_wheelhouse.wheels}
    for fault in FAULTS.values():
        variant = make_variant(wheels[fault.distribution], fault, tmp_path / fault.name)
        with zipfile.ZipFile(variant) as archive:
            for name in sorted({file for file, _, _ in fault.edits}):
                text = archive.read(name)
                if name.endswith(".py"):
                    compile(text, f"{fault.name}:{name}", "exec")
                else:
                    parsed = subprocess.run(["bash", "-n"], input=text, capture_output=True, check=False)
                    assert parsed.returncode == 0, (fault.name, name, parsed.stderr)


def test_the_benchmark_names_only_catalogued_variants_and_its_correct_ones_fix_nothing():
    """A correct variant is judged as rc1 is: it fixes no finding, and it is no fault."""
    for name in (*CORRECT, *(c for names in CONTROLS.values() for c in names)):
        assert name in FAULTS, name
    for name in CORRECT:
        assert FAULTS[name].fixes == frozenset() and FAULTS[name].regression.startswith("not a fault: "), name
    for names in CONTROLS.values():
        assert all(FAULTS[name].fixes <= RC1_FAILS for name in names), names
