"""Names of the tagged side outputs every corpus transform uses."""

STATS = "stats"  # {"unit/field": n} count dicts, summed into stats.json
DROPPED = "dropped"  # dropped rows with their reason (--write-dropped)
