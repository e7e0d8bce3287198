#!/bin/sh
# Print the path of the Python interpreter the venv is built with, or explain what to install.
#
#   tools/find-python.sh               the chosen interpreter's path
#   tools/find-python.sh --venv DIR    the same, after removing DIR when it was built with another
#                                      version (saying so), so that make builds it anew
#
# The choice: $PYTHON when set (it must be one of the supported versions); else the first
# supported version found, in this order of versions, each looked for as pythonX.Y then python3
# on PATH, in pyenv's versions (newest patch first), then in the usual system paths.
# 3.13 first: the runtime `firebase init functions` gives. The deploy runtime (python313...)
# follows the venv's version (tools/runtime.py). 3.14 is allowed but untested here (no 3.14
# interpreter installs from the registries this project reaches), so choosing it warns.
versions="3.13 3.14 3.12"
tested="3.13 3.12"
venv=""
if [ "${1:-}" = "--venv" ]; then venv="$2"; fi

version_of() {  # "3.13" for a working interpreter, nothing else
  [ -n "$1" ] && "$1" -c "import sys; print('%d.%d' % sys.version_info[:2])" 2>/dev/null
}
is_version() {
  [ "$(version_of "$1")" = "$2" ]
}
choose() {
  if [ -n "${PYTHON:-}" ]; then
    found=$(version_of "$PYTHON")
    for want in $versions; do
      if [ "$found" = "$want" ]; then echo "$PYTHON"; return 0; fi
    done
    echo "error: PYTHON=$PYTHON is ${found:+Python $found, }not a supported Python (supported: $versions): set PYTHON to a python3.13, python3.14 or python3.12, or leave it unset to let make look for one" >&2
    return 1
  fi
  root=""
  if command -v pyenv >/dev/null 2>&1; then root=$(pyenv root 2>/dev/null); fi
  for want in $versions; do
    for candidate in "$(command -v "python$want" 2>/dev/null)" "$(command -v python3 2>/dev/null)"; do
      if is_version "$candidate" "$want"; then echo "$candidate"; return 0; fi
    done
    if [ -n "$root" ]; then
      for version in $(pyenv versions --bare 2>/dev/null | grep "^$want\.[0-9]*$" | sort -t. -k3 -n -r); do
        candidate="$root/versions/$version/bin/python$want"
        if is_version "$candidate" "$want"; then echo "$candidate"; return 0; fi
      done
    fi
    for candidate in /usr/bin/python$want /usr/local/bin/python$want /opt/homebrew/bin/python$want; do
      if is_version "$candidate" "$want"; then echo "$candidate"; return 0; fi
    done
  done
  echo "error: no supported Python found (3.13, 3.14 or 3.12; the functions deploy to the runtime of the same version, python313...): install one (apt install python3.13, brew install python@3.13, pyenv install 3.13, or from https://www.python.org/downloads/) or run make with PYTHON=/path/to/python3.13" >&2
  return 1
}

python=$(choose) || exit 1
chosen=$(version_of "$python")
case " $tested " in
  *" $chosen "*) ;;
  *) echo "warning: Python $chosen ($python) is untested: the suite has run on Python $(echo $tested | sed "s/ / and /") only (docs/testing.md)" >&2 ;;
esac
if [ -n "$venv" ] && [ -x "$venv/bin/python" ]; then
  had=$(version_of "$venv/bin/python")
  if [ "$had" != "$chosen" ]; then
    echo "Recreating $venv: it was built with Python ${had:-(broken)}, and the chosen interpreter is Python $chosen ($python)." >&2
    rm -rf "$venv"
  fi
fi
echo "$python"
