"""What a run leaves behind: results folders and single files (written atomically, never over what
psdsim did not write), figures, terminal tables, and the timeline as a trace file."""
