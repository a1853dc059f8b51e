"""What a run leaves behind: results folders and single files (written atomically, never over what
psdsim did not write), figures, terminal tables, and the timeline as a trace file.

A write is kept safe by six modules, each using only those before it: places.py (where a write
lands), own_files.py (the marker, records and locks psdsim keeps beside what it writes), locks.py
(one writer per destination, and what a killed one left), overwrite_guard.py (what psdsim may
replace), atomic_writes.py (single files, staged and renamed into place, all or none) and
results.py (whole folders, swapped in); csv_table.py formats the tables they hold."""
