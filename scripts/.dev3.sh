python3 scripts/.dev3.py 2>&1 | grep -v Warning
