package chaos

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of one soak.
type Report struct {
	Seed         int64
	Chaos        time.Duration // length of the chaos phase
	ConvergeWait time.Duration // from the end of the chaos to the verdict
	WorkDir      string

	Verdict  *verdict
	Leaks    []leak
	Canaries int // canary values issued

	Requests    map[string]int64 // emulator counters, "total" included
	WorkloadOps int
	Ops         []countRow
	Refused     []string
	Faults      []countRow

	ManagerProcesses  int
	Kills             int
	LivenessRestarts  int
	OwnExits          []string
	LeaderChanges     int
	LeaseAcquisitions int
	GitClones         int // authenticated clones of the recipe repository
	GitRefused        int // requests with wrong credentials

	cfg Config
}

// Missed lists the targets the run missed; empty when it passed.
func (r *Report) Missed() []string {
	v := r.Verdict
	var out []string
	if v.converged != v.objects {
		out = append(out, fmt.Sprintf("%d of %d objects did not converge to their declared state", v.objects-v.converged, v.objects))
	}
	if n := len(v.unownedSandboxes); n > 0 {
		out = append(out, fmt.Sprintf("%d Vercel sandboxes have no owner object", n))
	}
	if n := len(v.unownedSnapshots); n > 0 {
		out = append(out, fmt.Sprintf("%d Vercel snapshots have no owner object", n))
	}
	if n := len(v.duplicates); n > 0 {
		out = append(out, fmt.Sprintf("%d objects have more than one Vercel sandbox", n))
	}
	if n := len(v.terminating); n > 0 {
		out = append(out, fmt.Sprintf("%d objects are stuck Terminating", n))
	}
	if n := len(v.shared); n > 0 {
		out = append(out, fmt.Sprintf("%d pool members or Vercel sandboxes are held by two Sandboxes", n))
	}
	if n := len(r.Leaks); n > 0 {
		out = append(out, fmt.Sprintf("canary values found %d times in manager logs, events or status", n))
	}
	// The workload declares only what is valid and can converge, so a
	// refusal is a defect of the CRDs or admission policies (one refused every
	// Sandbox with three Secret references once).
	if n := len(r.Refused); n > 0 {
		out = append(out, fmt.Sprintf("%d workload declarations were refused by the API server", n))
	}
	return out
}

// Table is the one table the soak prints: each target with its result.
func (r *Report) Table() string {
	v := r.Verdict
	var b strings.Builder
	fmt.Fprintf(&b, "Chaos soak, seed %d: %s of chaos with %d manager replicas (%d SIGKILLs, %d liveness restarts, %d exits of their own, %d processes, %d leader changes seen on the Lease), %d workload operations, %d fault episodes; verdict %s after the faults were lifted.\n\n",
		r.Seed, r.Chaos.Round(time.Second), r.cfg.Replicas, r.Kills, r.LivenessRestarts, len(r.OwnExits), r.ManagerProcesses, r.LeaderChanges,
		r.WorkloadOps, sumCounts(r.Faults), r.ConvergeWait.Round(time.Second))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(name, result, target string, ok bool) {
		mark := "ok"
		if !ok {
			mark = "MISSED"
		}
		if target == "" {
			mark = ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, result, target, mark)
	}
	fmt.Fprintf(tw, "MEASURE\tRESULT\tTARGET\t\n")
	row("Objects converged to their declared state", fmt.Sprintf("%d/%d (%s)", v.converged, v.objects, pct(v.converged, v.objects)), "100 %", v.converged == v.objects)
	kinds := make([]string, 0, len(v.perKind))
	for k := range v.perKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		c := v.perKind[k]
		row("  "+k, fmt.Sprintf("%d/%d", c[0], c[1]), "", true)
	}
	row("Vercel sandboxes with no owner object", fmt.Sprint(len(v.unownedSandboxes)), "0", len(v.unownedSandboxes) == 0)
	row("Vercel snapshots with no owner object", fmt.Sprint(len(v.unownedSnapshots)), "0", len(v.unownedSnapshots) == 0)
	row("Objects with more than one Vercel sandbox", fmt.Sprint(len(v.duplicates)), "0", len(v.duplicates) == 0)
	row("Objects stuck Terminating", fmt.Sprint(len(v.terminating)), "0", len(v.terminating) == 0)
	row("Pool members or Vercel sandboxes held by two Sandboxes", fmt.Sprint(len(v.shared)), "0", len(v.shared) == 0)
	row(fmt.Sprintf("Canary values found in manager logs, events, status (%d issued)", r.Canaries), fmt.Sprint(len(r.Leaks)), "0", len(r.Leaks) == 0)
	row("Workload declarations refused by the API server", fmt.Sprint(len(r.Refused)), "0", len(r.Refused) == 0)
	total := r.Requests["total"]
	row("Vercel requests per workload operation", fmt.Sprintf("%.2f (%d / %d)", ratio(total, r.WorkloadOps), total, r.WorkloadOps), "", true)
	ops := make([]string, 0, len(r.Requests))
	for op, n := range r.Requests {
		if op != "total" && n > 0 {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return r.Requests[ops[i]] > r.Requests[ops[j]] })
	for _, op := range ops {
		row("  "+op, fmt.Sprintf("%.2f (%d)", ratio(r.Requests[op], r.WorkloadOps), r.Requests[op]), "", true)
	}
	_ = tw.Flush()
	return b.String()
}

// Details lists what the table counts, for the post-mortem.
func (r *Report) Details() string {
	v := r.Verdict
	var b strings.Builder
	section := func(title string, items []string, limit int) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s (%d):\n", title, len(items))
		for i, s := range items {
			if i == limit {
				fmt.Fprintf(&b, "  … %d more\n", len(items)-limit)
				break
			}
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	section("Not converged", v.notConverged, 60)
	section("Vercel sandboxes with no owner object", v.unownedSandboxes, 30)
	section("Vercel snapshots with no owner object", v.unownedSnapshots, 30)
	section("Objects with more than one Vercel sandbox", v.duplicates, 30)
	section("Stuck Terminating", v.terminating, 30)
	section("Held by two Sandboxes", v.shared, 30)
	var leaks []string
	for _, l := range r.Leaks {
		leaks = append(leaks, fmt.Sprintf("%s: %s: %s", l.place, l.where, l.value))
	}
	section("Canary values found", leaks, 30)
	section("Manager exits the harness did not cause", r.OwnExits, 10)
	section("Workload requests refused by the API server", r.Refused, 20)
	var ops, faults []string
	for _, o := range r.Ops {
		ops = append(ops, fmt.Sprintf("%-34s %d", o.name, o.n))
	}
	for _, f := range r.Faults {
		faults = append(faults, fmt.Sprintf("%-34s %d", f.name, f.n))
	}
	section("Workload operations", ops, 100)
	section("Fault episodes", faults, 100)
	fmt.Fprintf(&b, "\nRecipe repository: %d clones with a git Secret's credentials, %d requests refused for wrong ones\n", r.GitClones, r.GitRefused)
	fmt.Fprintf(&b, "Logs: %s\n", r.WorkDir)
	return b.String()
}

func pct(a, b int) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f %%", 100*float64(a)/float64(b))
}

func ratio(a int64, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func sumCounts(rows []countRow) int {
	n := 0
	for _, r := range rows {
		n += r.n
	}
	return n
}
