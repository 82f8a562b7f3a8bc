# Sourced first by every benchmark script: `-h` or `--help` (anywhere among its arguments) prints the script's
# header comment (its usage) and exits before anything runs or is written. A script that hands its flags to a
# Python module names it in HELP_MODULE; that module's flags are printed after the header.
if [[ " $* " == *" -h "* || " $* " == *" --help "* ]]; then
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
    if [[ -n "${HELP_MODULE:-}" ]]; then
        echo
        (cd "$(dirname "$0")/.." && python -m "$HELP_MODULE" --help)
    fi
    exit 0
fi
