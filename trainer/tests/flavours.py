"""The command line of the Keras test scripts that build one thing per Keras flavour."""
import sys
import traceback


def build_each(build, args, per=2):
    """Calls build(*group) for each group of `per` arguments (WHICH OUT ...): a flavour whose
    build fails leaves the other flavours' checks to run. Exits 1 when any failed."""
    failed = False
    for i in range(0, len(args), per):
        try:
            build(*args[i:i + per])
        except Exception:  # noqa: BLE001  reported, and counted in the exit status
            traceback.print_exc()
            failed = True
    sys.exit(1 if failed else 0)
