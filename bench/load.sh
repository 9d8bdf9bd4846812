# bench/load.sh — sourced by the benchmark scripts that state how loaded the
# machine was: steal prints the share of CPU time the hypervisor gave to
# others and the idle share, from vmstat over 5 s (its "st" and "id"
# columns, found by name).
steal() {
	vmstat 1 6 | awk 'NR == 2 { for (i = 1; i <= NF; i++) { if ($i == "st") c = i; if ($i == "id") d = i } }
		NR > 3 { st += $c; id += $d; n++ }
		END { printf "%.0f %% stolen, %.0f %% idle (vmstat, 5 s)", st / n, id / n }'
}
