// A production source with no unit test and no UNMIRRORED entry (check_layout.py sources).
int untested() { return 0; }
