package ciconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// Parsers of single keys. Each takes the value, the job ("" outside jobs) and the key path
// for its messages, and answers with GitLab's wording where GitLab has one.

// maxScriptNesting is GitLab's limit on nested arrays in scripts (and rules).
const maxScriptNesting = 10

// scriptLines reads before_script/script/after_script: a string or an array of strings
// and arrays nested up to 10 levels (as !reference produces), flattened.
func scriptLines(v *val, job, key string) ([]string, error) {
	if v.kind == vString {
		return []string{v.text}, nil
	}
	bad := func(at *val) error {
		return errAt(at, job, key, "config should be a string or a nested array of strings up to %d levels deep", maxScriptNesting)
	}
	if v.kind != vSeq {
		return nil, bad(v)
	}
	var lines []string
	var walk func(s *val, level int) error
	walk = func(s *val, level int) error {
		if level > maxScriptNesting {
			return bad(s)
		}
		for _, item := range s.vals {
			switch item.kind {
			case vString:
				lines = append(lines, item.text)
			case vSeq:
				if err := walk(item, level+1); err != nil {
					return err
				}
			case vMap:
				return errAt(item, job, key, "config should be a string or a nested array of strings up to %d levels deep; "+
					"a line holding \": \" is read by YAML as a hash: quote the line", maxScriptNesting)
			default:
				return errAt(item, job, key, "config should be a string or a nested array of strings up to %d levels deep; "+
					"%s is %s: quote it", maxScriptNesting, orNull(item.text), item.describe())
			}
		}
		return nil
	}
	if err := walk(v, 1); err != nil {
		return nil, err
	}
	return lines, nil
}

func orNull(s string) string {
	if s == "" {
		return "an empty line"
	}
	return fmt.Sprintf("%q", s)
}

// stringList reads an array of strings.
func stringList(v *val, job, key string) ([]string, error) {
	if v.kind != vSeq {
		return nil, errAt(v, job, key, "config should be an array of strings")
	}
	out := make([]string, 0, len(v.vals))
	for _, item := range v.vals {
		if item.kind != vString {
			return nil, errAt(item, job, key, "config should be an array of strings")
		}
		out = append(out, item.text)
	}
	return out, nil
}

// stringOrList reads a string or an array of strings.
func stringOrList(v *val, job, key string) ([]string, error) {
	if v.kind == vString {
		return []string{v.text}, nil
	}
	if v.kind != vSeq {
		return nil, errAt(v, job, key, "config should be a string or an array of strings")
	}
	out := make([]string, 0, len(v.vals))
	for _, item := range v.vals {
		if item.kind != vString {
			return nil, errAt(item, job, key, "config should be a string or an array of strings")
		}
		out = append(out, item.text)
	}
	return out, nil
}

func boolValue(v *val, job, key string) (bool, error) {
	if v.kind != vBool {
		return false, errAt(v, job, key, "config should be a boolean value")
	}
	return v.b, nil
}

func stringValue(v *val, job, key string) (string, error) {
	if v.kind != vString {
		return "", errAt(v, job, key, "config should be a string")
	}
	return v.text, nil
}

func intValue(v *val, job, key string) (int, error) {
	if v.kind != vInt {
		return 0, errAt(v, job, key, "config should be an integer")
	}
	var n int
	if _, err := fmt.Sscan(v.text, &n); err != nil {
		return 0, errAt(v, job, key, "config is too large an integer")
	}
	return n, nil
}

// intOrList reads an integer or an array of integers (exit codes).
func intOrList(v *val, job, key string) ([]int, error) {
	if v.kind == vInt {
		n, err := intValue(v, job, key)
		return []int{n}, err
	}
	if v.kind != vSeq || len(v.vals) == 0 {
		return nil, errAt(v, job, key, "config should be an integer or an array of integers")
	}
	out := make([]int, 0, len(v.vals))
	for _, item := range v.vals {
		n, err := intValue(item, job, key)
		if err != nil {
			return nil, errAt(item, job, key, "config should be an integer or an array of integers")
		}
		out = append(out, n)
	}
	return out, nil
}

// checkKeys refuses keys outside allowed (GitLab: "config contains unknown keys: a, b") and
// keys jobapi knows but does not support yet (unsupported: key → why).
func checkKeys(m *val, job, key string, allowed []string, unsupported map[string]string) error {
	var unknown []string
	for i, k := range m.keys {
		if why, ok := unsupported[k]; ok {
			path := k
			if key != "" {
				path = key + ":" + k
			}
			return errAt(m.vals[i], job, path, "is not supported by jobapi yet%s", why)
		}
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		line := m.vals[m.index[unknown[0]]].line
		return &Error{Line: line, Job: job, Key: key, Message: "config contains unknown keys: " + strings.Join(unknown, ", ")}
	}
	return nil
}

func durationSeconds(v *val, job, key string, limit int, limitText string) (int, error) {
	if v.kind != vString {
		return 0, errAt(v, job, key, "config should be a duration, such as \"1h 30m\" or \"3 hours\"")
	}
	s, err := parseDuration(v.text)
	if err != nil {
		return 0, errAt(v, job, key, "config should be a duration, such as \"1h 30m\" or \"3 hours\"; %q is not one", v.text)
	}
	if s > limit {
		return 0, errAt(v, job, key, "config should not exceed the limit (%s)", limitText)
	}
	return s, nil
}

// ---- image and services ----

var pullPolicies = []string{"always", "never", "if-not-present"}

var imageUnsupported = map[string]string{
	"docker":     " (executor options: platform, user)",
	"kubernetes": " (executor options)",
	"ports":      " (service ports)",
}

func parseImage(v *val, job, key string) (builds.Image, error) {
	return imageOrService(v, job, key, false)
}

func parseServices(v *val, job, key string) ([]builds.Image, error) {
	if v.kind != vSeq {
		return nil, errAt(v, job, key, "config should be an array of strings or hashes")
	}
	out := make([]builds.Image, 0, len(v.vals))
	for _, item := range v.vals {
		s, err := imageOrService(item, job, key, true)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func imageOrService(v *val, job, key string, service bool) (builds.Image, error) {
	what := "image"
	if service {
		what = "service"
	}
	switch v.kind {
	case vString:
		return builds.Image{Name: v.text}, nil
	case vMap:
	default:
		return builds.Image{}, errAt(v, job, key, "config should be a hash or a string")
	}
	allowed := []string{"name", "entrypoint", "pull_policy"}
	if service {
		allowed = append(allowed, "command", "alias", "variables")
	}
	if err := checkKeys(v, job, key, allowed, imageUnsupported); err != nil {
		return builds.Image{}, err
	}
	var im builds.Image
	name := v.get("name")
	if name == nil || name.kind != vString || name.text == "" {
		return builds.Image{}, errAt(v, job, key, "config: the %s needs a name (name: ruby:3.3)", what)
	}
	im.Name = name.text
	var err error
	if x := v.get("entrypoint"); x != nil && x.kind != vNull {
		if im.Entrypoint, err = stringList(x, job, key+":entrypoint"); err != nil {
			return builds.Image{}, err
		}
	}
	if x := v.get("command"); x != nil && x.kind != vNull {
		if im.Command, err = stringList(x, job, key+":command"); err != nil {
			return builds.Image{}, err
		}
	}
	if x := v.get("alias"); x != nil && x.kind != vNull {
		if im.Alias, err = stringValue(x, job, key+":alias"); err != nil {
			return builds.Image{}, err
		}
	}
	if x := v.get("pull_policy"); x != nil && x.kind != vNull {
		if im.PullPolicy, err = stringOrList(x, job, key+":pull_policy"); err != nil {
			return builds.Image{}, err
		}
		for _, p := range im.PullPolicy {
			if !slices.Contains(pullPolicies, p) {
				return builds.Image{}, errAt(x, job, key+":pull_policy", "config should be one of: %s", strings.Join(pullPolicies, ", "))
			}
		}
	}
	if x := v.get("variables"); x != nil && x.kind != vNull {
		vars, err := parseVariables(x, job, key+":variables", false)
		if err != nil {
			return builds.Image{}, err
		}
		for _, yv := range vars {
			im.Variables = append(im.Variables, builds.Variable{Key: yv.key, Value: yv.value})
		}
	}
	return im, nil
}

// ---- variables ----

// yamlVar is one entry of `variables:`.
type yamlVar struct {
	key, value string
	raw        bool // expand: false
	line       int
}

var variableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseVariables reads `variables:`: NAME: value (a string, a number or a boolean, as
// their text) or NAME: {value, expand} and, at the top level, {description, options}.
func parseVariables(v *val, job, key string, global bool) ([]yamlVar, error) {
	if v.kind != vMap {
		return nil, errAt(v, job, key, "config should be a hash of key value pairs, value can be a hash")
	}
	out := make([]yamlVar, 0, len(v.keys))
	for i, name := range v.keys {
		x := v.vals[i]
		if !variableName.MatchString(name) || len(name) > builds.MaxNameLength {
			return nil, errAt(x, job, key, "%q is not a valid variable name: letters, digits and _, not starting with a digit", name)
		}
		yv := yamlVar{key: name, line: x.line}
		switch x.kind {
		case vString, vInt, vFloat, vBool:
			yv.value = x.text
		case vNull:
			// GitLab keeps a variable without a value as an empty one.
		case vMap:
			allowed := []string{"value", "expand"}
			if global {
				allowed = append(allowed, "description", "options")
			}
			for _, dk := range x.keys {
				if !slices.Contains(allowed, dk) {
					return nil, errAt(x, job, key+":"+name, "config uses invalid data keys: %s", dk)
				}
			}
			if val := x.get("value"); val != nil {
				switch val.kind {
				case vString, vInt, vFloat, vBool:
					yv.value = val.text
				case vNull:
				default:
					return nil, errAt(val, job, key+":"+name, "value should be a string")
				}
			}
			if d := x.get("description"); d != nil && d.kind != vNull && d.kind != vString {
				return nil, errAt(d, job, key+":"+name, "description should be a string")
			}
			if e := x.get("expand"); e != nil && e.kind != vNull {
				expand, err := boolValue(e, job, key+":"+name+":expand")
				if err != nil {
					return nil, err
				}
				yv.raw = !expand
			}
			if o := x.get("options"); o != nil && o.kind != vNull {
				opts, err := stringList(o, job, key+":"+name+":options")
				if err != nil {
					return nil, err
				}
				if !slices.Contains(opts, yv.value) {
					return nil, errAt(o, job, key+":"+name, "config value must be present in options")
				}
			}
		default:
			return nil, errAt(x, job, key+":"+name, "variable definition must be either a string or a hash")
		}
		if len(yv.value) > builds.MaxVariableValue {
			return nil, errAt(x, job, key+":"+name, "value is longer than %d bytes", builds.MaxVariableValue)
		}
		out = append(out, yv)
	}
	return out, nil
}

// ---- retry, allow_failure ----

// GitLab's retry:when values. Those jobapi never records as a failure reason (the job was
// never given to a runner for them) are dropped with a warning.
var retryWhen = []string{"always", "unknown_failure", "script_failure", "api_failure",
	"stuck_or_timeout_failure", "runner_system_failure", "runner_unsupported", "stale_schedule",
	"job_execution_timeout", "archived_failure", "unmet_prerequisites", "scheduler_failure",
	"data_integrity_failure"}

// maxRetry is GitLab's: retry accepts 0, 1 or 2.
const maxRetry = 2

func parseRetry(v *val, job, key string, warn func(string)) (builds.RetryRule, error) {
	switch v.kind {
	case vInt:
		n, err := intValue(v, job, key)
		if err != nil || n < 0 || n > maxRetry {
			return builds.RetryRule{}, errAt(v, job, key, "config must be between 0 and %d", maxRetry)
		}
		return builds.RetryRule{Max: n}, nil
	case vMap:
	default:
		return builds.RetryRule{}, errAt(v, job, key, "config should be a hash or an integer")
	}
	if err := checkKeys(v, job, key, []string{"max", "when", "exit_codes"}, nil); err != nil {
		return builds.RetryRule{}, err
	}
	var r builds.RetryRule
	if x := v.get("max"); x != nil && x.kind != vNull {
		n, err := intValue(x, job, key+":max")
		if err != nil || n < 0 || n > maxRetry {
			return builds.RetryRule{}, errAt(x, job, key, "max config must be between 0 and %d", maxRetry)
		}
		r.Max = n
	}
	if x := v.get("when"); x != nil && x.kind != vNull {
		whens, err := stringOrList(x, job, key+":when")
		if err != nil {
			return builds.RetryRule{}, err
		}
		for _, w := range whens {
			switch {
			case !slices.Contains(retryWhen, w):
				return builds.RetryRule{}, errAt(x, job, key+":when", "config contains unknown values: %s", w)
			case w == "always" || builds.ValidFailureReason(w):
				r.When = append(r.When, w)
			default:
				warn(fmt.Sprintf("%s:when %s: jobapi never fails a job for this reason; ignored", keyPath(job, key), w))
			}
		}
	}
	if x := v.get("exit_codes"); x != nil && x.kind != vNull {
		codes, err := intOrList(x, job, key+":exit_codes")
		if err != nil {
			return builds.RetryRule{}, err
		}
		r.ExitCodes = codes
	}
	return r, nil
}

// parseAllowFailure reads true/false or {exit_codes: …}.
func parseAllowFailure(v *val, job, key string) (allow bool, codes []int, err error) {
	switch v.kind {
	case vBool:
		return v.b, nil, nil
	case vMap:
		if err := checkKeys(v, job, key, []string{"exit_codes"}, nil); err != nil {
			return false, nil, err
		}
		x := v.get("exit_codes")
		if x == nil || x.kind == vNull {
			return false, nil, errAt(v, job, key, "config missing required keys: exit_codes")
		}
		codes, err := intOrList(x, job, key+":exit_codes")
		return false, codes, err
	}
	return false, nil, errAt(v, job, key, "config should be a hash or a boolean value")
}

// ---- artifacts ----

var artifactsWhen = []string{"on_success", "on_failure", "always"}

// reportFormats is GitLab's TYPE_AND_FORMAT_PAIRS for reports with DEFAULT_FILE_NAMES:
// the format and name gitlab-runner uploads each report with.
var reportFormats = map[string]struct{ format, name string }{
	"junit": {"gzip", "junit.xml"}, "metrics": {"gzip", "metrics.txt"}, "dotenv": {"gzip", ".env"},
	"cobertura": {"gzip", "cobertura-coverage.xml"}, "jacoco": {"gzip", "jacoco-coverage.xml"},
	"lsif": {"zip", "lsif.json"}, "scip": {"zip", "index.scip"}, "cyclonedx": {"gzip", "gl-sbom.cdx.json"},
	"annotations": {"gzip", "gl-annotations.json"}, "repository_xray": {"gzip", "gl-repository-xray.json"},
	"sast": {"raw", "gl-sast-report.json"}, "secret_detection": {"raw", "gl-secret-detection-report.json"},
	"dependency_scanning":    {"raw", "gl-dependency-scanning-report.json"},
	"container_scanning":     {"raw", "gl-container-scanning-report.json"},
	"cluster_image_scanning": {"raw", "gl-cluster-image-scanning-report.json"},
	"dast":                   {"raw", "gl-dast-report.json"}, "license_scanning": {"raw", "gl-license-scanning-report.json"},
	"accessibility": {"raw", "gl-accessibility.json"}, "codequality": {"raw", "gl-code-quality-report.json"},
	"performance": {"raw", "performance.json"}, "browser_performance": {"raw", "browser-performance.json"},
	"load_performance": {"raw", "load-performance.json"}, "terraform": {"raw", "tfplan.json"},
	"requirements": {"raw", "requirements.json"}, "requirements_v2": {"raw", "requirements_v2.json"},
	"coverage_fuzzing": {"raw", "gl-coverage-fuzzing.json"}, "api_fuzzing": {"raw", "gl-api-fuzzing-report.json"},
	"sarif": {"raw", "gl-sarif-report.sarif"},
}

// artifacts:access values, and what expose_as may say (GitLab's EXPOSE_AS_REGEX).
var (
	artifactsAccess = []string{builds.ArtifactAccessNone, builds.ArtifactAccessDeveloper, builds.ArtifactAccessAll}
	exposeAsText    = regexp.MustCompile(`^\w[-\w ]*$`)
)

// parseArtifactsAccess reads artifacts:access, or the older artifacts:public (false is
// developer); GitLab refuses both together. "" when neither is given (all).
func parseArtifactsAccess(v *val, job, key string) (string, error) {
	pub, acc := v.get("public"), v.get("access")
	if pub != nil && pub.kind != vNull && acc != nil && acc.kind != vNull {
		return "", errAt(v, job, key, "config please use only one the following keys: access, public")
	}
	if pub != nil && pub.kind != vNull {
		b, err := boolValue(pub, job, key+":public")
		if err != nil || b {
			return "", err
		}
		return builds.ArtifactAccessDeveloper, nil
	}
	if acc != nil && acc.kind != vNull {
		s, err := stringValue(acc, job, key+":access")
		if err != nil || !slices.Contains(artifactsAccess, s) {
			return "", errAt(acc, job, key+":access", "should be one of: %s", strings.Join(artifactsAccess, ", "))
		}
		if s == builds.ArtifactAccessAll {
			return "", nil
		}
		return s, nil
	}
	return "", nil
}

// parseArtifacts turns `artifacts:` into the runner's entries, as GitLab's
// BuildRunnerPresenter: an "archive" entry (zip) when there are paths or untracked, then
// one entry per report (when "always", GitLab's default file name and format).
func parseArtifacts(v *val, job, key string) ([]builds.Artifacts, error) {
	if v.kind != vMap {
		return nil, errAt(v, job, key, "config should be a hash")
	}
	if err := checkKeys(v, job, key, []string{"name", "untracked", "paths", "exclude", "when", "expire_in", "reports", "expose_as", "public", "access"}, nil); err != nil {
		return nil, err
	}
	archive := builds.Artifacts{ArtifactType: "archive", ArtifactFormat: "zip", When: "on_success"}
	var err error
	hasArchive := false
	if x := v.get("name"); x != nil && x.kind != vNull {
		if archive.Name, err = stringValue(x, job, key+":name"); err != nil {
			return nil, err
		}
	}
	if x := v.get("untracked"); x != nil && x.kind != vNull {
		if archive.Untracked, err = boolValue(x, job, key+":untracked"); err != nil {
			return nil, err
		}
		hasArchive = hasArchive || archive.Untracked
	}
	if x := v.get("paths"); x != nil && x.kind != vNull {
		if archive.Paths, err = stringList(x, job, key+":paths"); err != nil {
			return nil, err
		}
		hasArchive = true
	}
	if x := v.get("exclude"); x != nil && x.kind != vNull {
		if archive.Exclude, err = stringList(x, job, key+":exclude"); err != nil {
			return nil, err
		}
	}
	if x := v.get("when"); x != nil && x.kind != vNull {
		if archive.When, err = stringValue(x, job, key+":when"); err != nil {
			return nil, err
		}
		if !slices.Contains(artifactsWhen, archive.When) {
			return nil, errAt(x, job, key+":when", "config should be on_success, on_failure or always")
		}
	}
	if x := v.get("expire_in"); x != nil && x.kind != vNull {
		if x.kind != vString {
			return nil, errAt(x, job, key+":expire_in", "config should be a duration")
		}
		if x.text != "never" {
			if _, err := parseDuration(x.text); err != nil {
				return nil, errAt(x, job, key+":expire_in", "config should be a duration, such as \"30 days\", or never")
			}
		}
		archive.ExpireIn = x.text
	}
	access, err := parseArtifactsAccess(v, job, key)
	if err != nil {
		return nil, err
	}
	archive.Access = access
	if x := v.get("expose_as"); x != nil && x.kind != vNull {
		if archive.ExposeAs, err = stringValue(x, job, key+":expose_as"); err != nil {
			return nil, err
		}
		if len(archive.ExposeAs) > 100 {
			return nil, errAt(x, job, key+":expose_as", "is too long (maximum is 100 characters)")
		}
		if !exposeAsText.MatchString(archive.ExposeAs) {
			return nil, errAt(x, job, key+":expose_as", "can contain only letters, digits, '-', '_' and spaces")
		}
		if len(archive.Paths) == 0 {
			return nil, errAt(x, job, key+":paths", "can't be blank")
		}
		for _, p := range archive.Paths {
			if strings.Contains(p, "*") {
				return nil, errAt(v.get("paths"), job, key+":paths", "can't contain '*' when used with 'expose_as'")
			}
		}
	}
	var out []builds.Artifacts
	if hasArchive {
		out = append(out, archive)
	}
	reports := v.get("reports")
	if reports == nil || reports.kind == vNull {
		return out, nil
	}
	if reports.kind != vMap {
		return nil, errAt(reports, job, key+":reports", "config should be a hash")
	}
	for i, typ := range reports.keys {
		rv := reports.vals[i]
		rkey := key + ":reports:" + typ
		if rv.kind == vNull {
			continue
		}
		var paths []string
		artifactType := typ
		if typ == "coverage_report" {
			if rv.kind != vMap {
				return nil, errAt(rv, job, rkey, "config should be a hash")
			}
			if err := checkKeys(rv, job, rkey, []string{"coverage_format", "path"}, nil); err != nil {
				return nil, err
			}
			format, path := rv.get("coverage_format"), rv.get("path")
			if format == nil || format.kind != vString || (format.text != "cobertura" && format.text != "jacoco") {
				return nil, errAt(rv, job, rkey, "coverage_format should be cobertura or jacoco")
			}
			if path == nil || path.kind != vString {
				return nil, errAt(rv, job, rkey, "path should be a string")
			}
			artifactType, paths = format.text, []string{path.text}
		} else {
			if _, ok := reportFormats[typ]; !ok {
				return nil, errAt(rv, job, key+":reports", "config contains unknown keys: %s", typ)
			}
			if paths, err = stringOrList(rv, job, rkey); err != nil {
				return nil, err
			}
		}
		f := reportFormats[artifactType]
		out = append(out, builds.Artifacts{Name: f.name, Paths: paths, When: "always",
			ArtifactType: artifactType, ArtifactFormat: f.format, ExpireIn: archive.ExpireIn, Access: archive.Access})
	}
	return out, nil
}

// ---- cache ----

// maxCaches is GitLab's limit of caches per job; maxFallbackKeys of fallback keys.
const (
	maxCaches       = 4
	maxFallbackKeys = 5
)

var (
	cachePolicies = []string{"pull-push", "pull", "push"}
	cacheWhen     = []string{"on_success", "on_failure", "always"}
)

func parseCaches(v *val, job, key string, warn func(string)) ([]builds.Cache, error) {
	items := []*val{v}
	if v.kind == vSeq {
		items = v.vals
	}
	if len(items) > maxCaches {
		return nil, errAt(v, job, key, "config no more than %d caches can be created", maxCaches)
	}
	out := make([]builds.Cache, 0, len(items))
	for _, item := range items {
		c, err := parseCache(item, job, key, warn)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func parseCache(v *val, job, key string, warn func(string)) (builds.Cache, error) {
	if v.kind != vMap {
		return builds.Cache{}, errAt(v, job, key, "config should be a hash")
	}
	if err := checkKeys(v, job, key, []string{"key", "paths", "policy", "when", "untracked", "fallback_keys", "unprotect"}, nil); err != nil {
		return builds.Cache{}, err
	}
	c := builds.Cache{Key: "default", Policy: "pull-push", When: "on_success"}
	var err error
	if x := v.get("key"); x != nil && x.kind != vNull {
		switch x.kind {
		case vString, vInt, vFloat:
			c.Key = x.text
		case vMap:
			// key:files, files_commits and prefix: the key is computed from the repository
			// when a pipeline is made of the job (cacheKeySpec.compute).
			if _, err := parseCacheKeyFiles(x, job, key+":key"); err != nil {
				return builds.Cache{}, err
			}
			c.Key = ""
		default:
			return builds.Cache{}, errAt(x, job, key+":key", "config should be a string or a hash")
		}
		if err := checkCacheKey(c.Key); err != "" {
			return builds.Cache{}, errAt(x, job, key+":key", "config %s", err)
		}
	}
	if x := v.get("paths"); x != nil && x.kind != vNull {
		if c.Paths, err = stringList(x, job, key+":paths"); err != nil {
			return builds.Cache{}, err
		}
	}
	if x := v.get("policy"); x != nil && x.kind != vNull {
		if c.Policy, err = stringValue(x, job, key+":policy"); err != nil {
			return builds.Cache{}, err
		}
		if !slices.Contains(cachePolicies, c.Policy) && !strings.Contains(c.Policy, "$") {
			return builds.Cache{}, errAt(x, job, key+":policy", "config should be one of: %s", strings.Join(cachePolicies, ", "))
		}
	}
	if x := v.get("when"); x != nil && x.kind != vNull {
		if c.When, err = stringValue(x, job, key+":when"); err != nil {
			return builds.Cache{}, err
		}
		if !slices.Contains(cacheWhen, c.When) {
			return builds.Cache{}, errAt(x, job, key+":when", "config should be one of: %s", strings.Join(cacheWhen, ", "))
		}
	}
	if x := v.get("untracked"); x != nil && x.kind != vNull {
		if c.Untracked, err = boolValue(x, job, key+":untracked"); err != nil {
			return builds.Cache{}, err
		}
	}
	if x := v.get("fallback_keys"); x != nil && x.kind != vNull {
		if c.FallbackKeys, err = stringList(x, job, key+":fallback_keys"); err != nil {
			return builds.Cache{}, err
		}
		if len(c.FallbackKeys) > maxFallbackKeys {
			return builds.Cache{}, errAt(x, job, key+":fallback_keys", "config must be an array of up to %d strings", maxFallbackKeys)
		}
		for _, k := range c.FallbackKeys {
			if err := checkCacheKey(k); err != "" {
				return builds.Cache{}, errAt(x, job, key+":fallback_keys", "config %s", err)
			}
		}
	}
	if x := v.get("unprotect"); x != nil && x.kind != vNull {
		// Shared with unprotected refs: the key keeps its -non_protected suffix (payload).
		u, err := boolValue(x, job, key+":unprotect")
		if err != nil {
			return builds.Cache{}, err
		}
		c.Unprotect = u
	}
	return c, nil
}

// checkCacheKey applies GitLab's rules on cache key text.
func checkCacheKey(k string) string {
	switch {
	case strings.Contains(k, "/") || strings.Contains(strings.ToLower(k), "%2f"):
		return `cannot contain the "/" character`
	case k == "." || k == ".." || strings.ToLower(k) == "%2e" || strings.ToLower(k) == "%2e%2e":
		return `cannot be "." or ".."`
	}
	return ""
}

func keyPath(job, key string) string {
	if job == "" {
		return key
	}
	return "jobs:" + job + ":" + key
}

// parseCoverage reads `coverage: /regex/` and returns the regex without its slashes, as
// GitLab stores it (Entry::Coverage); it must compile as RE2, GitLab's engine for it.
func parseCoverage(v *val, job string) (string, error) {
	if v.kind != vString || len(v.text) < 2 || !strings.HasPrefix(v.text, "/") || !strings.HasSuffix(v.text, "/") {
		return "", errAt(v, job, "coverage", "config must be a regular expression, such as '/Coverage: (\\d+\\.\\d+)%%/'")
	}
	body := v.text[1 : len(v.text)-1]
	if _, err := regexp.Compile(body); err != nil {
		return "", errAt(v, job, "coverage", "config must be a regular expression: %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return body, nil
}
