package ciconfig

import (
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// trigger: a bridge job (GitLab's Ci::Bridge) that creates a child pipeline from files of
// the project's repository. Its child's configuration is GitLab's
// YAML.dump('include' => trigger:include) (Ci::Bridge#yaml_for_downstream): the entries
// are include: entries, and the child compiles them through Context.Includes at the
// parent's commit when the bridge runs (package downstream), not here.

// bridgeRunnerKeys are the job keys of what a runner does: a trigger job has none (GitLab
// reports them as unknown keys of a bridge).
var bridgeRunnerKeys = []string{"script", "before_script", "after_script", "image", "services", "tags",
	"cache", "artifacts", "coverage", "timeout", "interruptible", "id_tokens"}

var triggerKeys = []string{"include", "strategy", "forward"}

// triggerUnsupported: the multi-project forms.
var triggerUnsupported = map[string]string{
	"project": " (multi-project pipelines: only child pipelines of the same project, trigger:include, are)",
	"branch":  " (multi-project pipelines)",
}

// triggerIncludeUnsupported: the include entries a child pipeline may not use here.
var triggerIncludeUnsupported = map[string]string{
	"project":   " (files of another project)",
	"template":  " (GitLab's templates)",
	"component": " (CI/CD components)",
	"remote":    " (a child's configuration comes from the project's repository)",
	"inputs":    " (spec:inputs)",
}

// maxTriggerIncludes: GitLab's bridge entry accepts at most three files in trigger:include.
const maxTriggerIncludes = 3

func parseTrigger(v *val, job string) (*builds.Trigger, error) {
	switch v.kind {
	case vString:
		return nil, errAt(v, job, "trigger", "is not supported by jobapi yet (multi-project pipelines: trigger: %s names another project; a child pipeline is trigger: {include: file.yml})", v.text)
	case vMap:
	default:
		return nil, errAt(v, job, "trigger", "config should be a hash with include:")
	}
	if err := checkKeys(v, job, "trigger", triggerKeys, triggerUnsupported); err != nil {
		return nil, err
	}
	t := &builds.Trigger{ForwardYAMLVariables: true}
	inc := v.get("include")
	if inc == nil || inc.kind == vNull {
		return nil, errAt(v, job, "trigger", "config should have include: the child pipeline's file")
	}
	var err error
	if t.Include, err = parseTriggerInclude(inc, job); err != nil {
		return nil, err
	}
	if s := v.get("strategy"); s != nil && s.kind != vNull {
		if s.kind != vString || s.text != builds.StrategyDepend {
			return nil, errAt(s, job, "trigger:strategy", "config should be depend")
		}
		t.Strategy = builds.StrategyDepend
	}
	if f := v.get("forward"); f != nil && f.kind != vNull {
		if f.kind != vMap {
			return nil, errAt(f, job, "trigger:forward", "config should be a hash")
		}
		if err := checkKeys(f, job, "trigger:forward", []string{"yaml_variables", "pipeline_variables"}, nil); err != nil {
			return nil, err
		}
		if x := f.get("yaml_variables"); x != nil && x.kind != vNull {
			if t.ForwardYAMLVariables, err = boolValue(x, job, "trigger:forward:yaml_variables"); err != nil {
				return nil, err
			}
		}
		if x := f.get("pipeline_variables"); x != nil && x.kind != vNull {
			if t.ForwardPipelineVariables, err = boolValue(x, job, "trigger:forward:pipeline_variables"); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// parseTriggerInclude reads trigger:include: a path, or a list of {local: path} and
// {artifact: path, job: name} (a path alone in the list is GitLab's short form of local).
// The artifact's job must run before the bridge: checkGraph sees to it.
func parseTriggerInclude(v *val, job string) ([]builds.TriggerInclude, error) {
	const key = "trigger:include"
	items := []*val{v}
	if v.kind == vSeq {
		items = v.vals
	}
	if len(items) == 0 {
		return nil, errAt(v, job, key, "config should name at least one file")
	}
	if len(items) > maxTriggerIncludes {
		return nil, errAt(v, job, key, "config has too many entries (maximum %d)", maxTriggerIncludes)
	}
	out := make([]builds.TriggerInclude, 0, len(items))
	for _, it := range items {
		var p *val
		switch it.kind {
		case vString:
			p = it
		case vMap:
			if err := checkKeys(it, job, key, []string{"local", "artifact", "job"}, triggerIncludeUnsupported); err != nil {
				return nil, err
			}
			if a := it.get("artifact"); a != nil {
				inc, err := parseTriggerArtifact(it, a, job)
				if err != nil {
					return nil, err
				}
				out = append(out, inc)
				continue
			}
			if it.has("job") {
				return nil, errAt(it, job, key, "config must specify the artifact to fetch the job's file from (artifact: path)")
			}
			p = it.get("local")
			if p == nil || p.kind != vString {
				return nil, errAt(it, job, key, "config should be {local: path} with the file's path in the repository")
			}
		default:
			return nil, errAt(it, job, key, "config should be a path or a list of {local: path}")
		}
		path := strings.TrimPrefix(strings.TrimSpace(p.text), "/")
		if path == "" {
			return nil, errAt(p, job, key, "config should name a file of the repository")
		}
		if strings.HasPrefix(p.text, "http://") || strings.HasPrefix(p.text, "https://") {
			return nil, errAt(p, job, key, "is not supported by jobapi yet (a child's configuration comes from the project's repository, not %s)", p.text)
		}
		out = append(out, builds.TriggerInclude{Local: path})
	}
	return out, nil
}

// parseTriggerArtifact reads {artifact: path, job: name} (GitLab's
// Entry::Include validations for an artifact entry).
func parseTriggerArtifact(it, a *val, job string) (builds.TriggerInclude, error) {
	const key = "trigger:include"
	if it.has("local") {
		return builds.TriggerInclude{}, errAt(it, job, key, "config should have exactly one of local, artifact")
	}
	if a.kind != vString || strings.TrimSpace(a.text) == "" {
		return builds.TriggerInclude{}, errAt(a, job, key+":artifact", "config should be the path of a file in the job's artifacts archive")
	}
	j := it.get("job")
	if j == nil || j.kind == vNull {
		return builds.TriggerInclude{}, errAt(it, job, key, "config must specify the job where to fetch the artifact from")
	}
	if j.kind != vString || j.text == "" {
		return builds.TriggerInclude{}, errAt(j, job, key+":job", "config should be a job name")
	}
	return builds.TriggerInclude{Artifact: strings.TrimPrefix(strings.TrimSpace(a.text), "/"), Job: j.text}, nil
}

// ChildConfig is the configuration text of a bridge's child pipeline: its trigger:include
// entries as the include: of a file of their own, as GitLab builds it.
func ChildConfig(t *builds.Trigger) []byte {
	var b strings.Builder
	b.WriteString("include:\n")
	for _, inc := range t.Include {
		if inc.Artifact != "" {
			b.WriteString("  - artifact: ")
			b.WriteString(quoteYAML(inc.Artifact))
			b.WriteString("\n    job: ")
			b.WriteString(quoteYAML(inc.Job))
			b.WriteString("\n")
			continue
		}
		b.WriteString("  - local: ")
		b.WriteString(quoteYAML(inc.Local))
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// quoteYAML writes s as a double-quoted YAML scalar.
func quoteYAML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\x`)
			b.WriteString(strings.ToUpper(string("0123456789abcdef"[r>>4]) + string("0123456789abcdef"[r&15])))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
