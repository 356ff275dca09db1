package main

import (
	"cmp"
	"fmt"
	"slices"
)

// queriesPer fills QueriesPerRequest: endpoint name in the table → call name and status
// (0: any).
func queriesPer(r *Result, q queryCounts, rows map[string]callKey) {
	r.QueriesPerRequest = map[string]float64{}
	for row, k := range rows {
		var statuses []int
		if k.status != 0 {
			statuses = []int{k.status}
		}
		if v, ok := q.per(k.endpoint, statuses...); ok {
			r.QueriesPerRequest[row] = v
		}
	}
}

func (e *env) result(name string, res Resources, rec *recorder) *Result {
	r := &Result{Scenario: name, Resources: res, Endpoints: rec.summary(), Errors: rec.totalErrors(),
		BackgroundQueries: res.queries.other, Params: map[string]any{}, Extra: map[string]any{}}
	if e.queries == nil {
		r.BackgroundQueries = -1
	}
	return r
}

// walPer records the WAL written per unit of work (bytes, and full-page images).
func walPer(r *Result, unit string, n int) {
	if r.WAL == nil || n <= 0 {
		return
	}
	r.Extra["wal_bytes_per_"+unit] = round3(r.WAL.MB * (1 << 20) / float64(n))
	r.Extra["wal_fpi_per_"+unit] = round3(float64(r.WAL.FPI) / float64(n))
}

// costPer adds what one unit of work cost: WAL, jobapi's CPU, and the whole machine's.
func costPer(r *Result, res Resources, unit string, n int) {
	walPer(r, unit, n)
	if n <= 0 {
		return
	}
	if res.ServerCPU > 0 {
		r.Extra["server_cpu_us_per_"+unit] = round3(res.ServerCPU / float64(n) * 1e6)
	}
	u := &unitCost{Unit: unit}
	if per := res.Machine.perUnit(res, n); per != nil {
		r.Extra["machine_cpu_us_per_"+unit] = per
		u.Machine = per["total_busy"]
	}
	if res.Tested != nil {
		u.Tested = res.Tested.perUnit(n)
		r.Extra["tested_cpu_us_per_"+unit] = u.Tested
	}
	r.unit = u
}

func (e *env) ratio(r *Result, baseline float64) {
	if baseline > 0 {
		r.RatioToBaseline = round3(r.Throughput / baseline)
	}
}

// refBaseline is the baseline a ratio target compares with: the adjacent one if measured.
func refBaseline(baseline, adjacent float64) float64 {
	if adjacent > 0 {
		return adjacent
	}
	return baseline
}

// ratioTarget sets the ratios to the run's baseline and to the adjacent one, and the target
// on the adjacent one when there is one.
func (e *env) ratioTarget(r *Result, baseline, adjacent, want float64, name string) {
	e.ratio(r, baseline)
	if baseline <= 0 && adjacent <= 0 {
		return // no baseline in this run: nothing to compare with
	}
	got := r.RatioToBaseline
	if adjacent > 0 {
		got = round3(r.Throughput / adjacent)
		r.Extra["adjacent_baseline_updates_per_s"] = adjacent
		r.Extra["ratio_to_adjacent_baseline"] = got
		name += " (adjacent baseline)"
	}
	r.Targets = append(r.Targets, Target{Name: name, Want: fmt.Sprintf("≥ %g", want), Got: got, Met: got >= want})
}

// repeated runs a ratio scenario cfg.Repeat times and returns the run whose ratio to its
// adjacent baseline is the median, with every run's ratio in extra.repeat_ratios.
func (e *env) repeated(name string, run func() (*Result, error)) (*Result, error) {
	if e.cfg.Repeat <= 1 {
		return run()
	}
	type ratioed struct {
		r     *Result
		ratio float64
	}
	var runs []ratioed
	for i := 0; i < e.cfg.Repeat; i++ {
		r, err := run()
		if err != nil {
			return r, err
		}
		ratio, _ := r.Extra["ratio_to_adjacent_baseline"].(float64)
		if ratio == 0 {
			ratio = r.RatioToBaseline
		}
		e.logf("%s run %d of %d: %s %s, ratio %.3f", name, i+1, e.cfg.Repeat, fmtF(r.Throughput), r.Unit, ratio)
		runs = append(runs, ratioed{r, ratio})
	}
	slices.SortFunc(runs, func(a, b ratioed) int { return cmp.Compare(a.ratio, b.ratio) })
	ratios := make([]float64, len(runs))
	for i, x := range runs {
		ratios[i] = x.ratio
	}
	med := runs[(len(runs)-1)/2].r
	med.Extra["repeat_ratios"] = ratios
	// The CPU per unit is each run's own, medians taken separately (the efficiency table's).
	if med.unit != nil {
		var machine, tested []float64
		for _, x := range runs {
			if x.r.unit != nil {
				machine, tested = append(machine, x.r.unit.Machine), append(tested, x.r.unit.Tested)
			}
		}
		med.unit = &unitCost{Unit: med.unit.Unit, Machine: median(machine), Tested: median(tested)}
		med.Extra["repeat_machine_cpu_us_per_"+med.unit.Unit] = machine
		med.Extra["repeat_tested_cpu_us_per_"+med.unit.Unit] = tested
		med.Extra["median_machine_cpu_us_per_"+med.unit.Unit] = med.unit.Machine
		med.Extra["median_tested_cpu_us_per_"+med.unit.Unit] = med.unit.Tested
	}
	return med, nil
}
