package builds

// Coverage is GitLab's pipeline coverage: the average of its latest jobs' coverage; ok is
// false when none has one (or the pipeline was read without its builds).
func (p Pipeline) Coverage() (float64, bool) {
	sum, n := 0.0, 0
	for _, b := range p.Builds {
		if b.RetriedBy == 0 && b.Coverage != nil {
			sum += *b.Coverage
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
