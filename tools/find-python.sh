#!/bin/sh
# Print the path of a Python 3.12 interpreter (the functions' runtime, python312), or explain
# what to install. Order: $PYTHON, python3.12 on PATH, pyenv's 3.12.x, the usual system paths.
want="3.12"
is_wanted() {
  [ -n "$1" ] && "$1" -c "import sys; sys.exit(sys.version_info[:2] != (3, 12))" >/dev/null 2>&1
}
for candidate in "${PYTHON:-}" "$(command -v python3.12 2>/dev/null)"; do
  if is_wanted "$candidate"; then echo "$candidate"; exit 0; fi
done
if command -v pyenv >/dev/null 2>&1; then
  root=$(pyenv root)
  for version in $(pyenv versions --bare 2>/dev/null | grep "^$want\." | sort -t. -k3 -n -r); do
    candidate="$root/versions/$version/bin/python$want"
    if is_wanted "$candidate"; then echo "$candidate"; exit 0; fi
  done
fi
for candidate in /usr/bin/python$want /usr/local/bin/python$want /opt/homebrew/bin/python$want; do
  if is_wanted "$candidate"; then echo "$candidate"; exit 0; fi
done
echo "error: Python $want not found (the functions run on python312): install it (apt install python$want, brew install python@$want, pyenv install $want or uv python install $want) or run make with PYTHON=/path/to/python$want" >&2
exit 1
