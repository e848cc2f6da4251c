"""acker."""
