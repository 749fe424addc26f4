"""Tables, verdicts and profiles from what a run wrote: rows, logs, traces, samples."""
