package ciconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The cache keys GitLab computes from files (Seed::Build::Cache): the SHA-1 of the sorted,
// deduplicated ids joined with "-", after the prefix or the cache's index. The digests
// below were computed outside Go (printf '…' | sha1sum).
func TestCacheKeyFromFiles(t *testing.T) {
	t.Parallel()
	const (
		lock, yarn, nested = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222", "3333333333333333333333333333333333333333"
		lockAndYarn        = "2ee50e071df39727974b4559096338460e0ef111" // sha1("1111…-2222…")
		lockOnly           = "0a05a9e69e5757ac71c75a50418622624f042c97" // sha1("1111…")
		yarnAndNested      = "ff863a5eb56f62b7e8ec1d0631b3741badb7d35c" // sha1("2222…-3333…")
		commitsAC          = "544efcb65ccfe7e081ac978b6a5375eada4e9665" // sha1("aaaa…-cccc…")
		nestedOnly         = "f92882e77231661613e7af948033c8b9ea883267" // sha1("3333…")
		yarnOnly           = "4ef6c88cdec9dbcc9bd8b7fa0fdfe4cc43bfed4f" // sha1("2222…")
		commitA            = "a56559418dc7908ce5f0b24b05c78e055cb863dc" // sha1("aaaa…")
	)
	r := &repo{
		files: []string{"package-lock.json", "yarn.lock", "web/yarn.lock", "docs/a.md"},
		blobs: map[string]string{"package-lock.json": lock, "yarn.lock": yarn, "web/yarn.lock": nested},
		commits: map[string]string{"package-lock.json": strings.Repeat("c", 40), "yarn.lock": strings.Repeat("a", 40),
			"web": strings.Repeat("a", 40)},
	}
	ctx := mainPush
	ctx.Repository = r
	for _, c := range []struct{ name, cache, want string }{
		{"two files, in either order", "{key: {files: [yarn.lock, package-lock.json]}}", "0-" + lockAndYarn},
		{"a leading slash is dropped", "{key: {files: [/package-lock.json]}}", "0-" + lockOnly},
		{"a missing file is left out", "{key: {files: [package-lock.json, Gemfile.lock]}}", "0-" + lockOnly},
		{"no file at all", "{key: {files: [Gemfile.lock]}}", "0-default"},
		{"./ paths name no file", "{key: {files: [./package-lock.json]}}", "0-default"},
		{"prefix", "{key: {files: [package-lock.json, yarn.lock], prefix: deps}}", "deps-" + lockAndYarn},
		{"prefix with no file", "{key: {files: [Gemfile.lock], prefix: $CI_JOB_NAME}}", "$CI_JOB_NAME-default"},
		{"an empty prefix keeps the digest alone", "{key: {files: [package-lock.json], prefix: ''}}", lockOnly},
		// search_files_by_wildcard_path: ** needs the slash after it, * stays in a directory.
		{"**/ matches below the root only", "{key: {files: ['**/yarn.lock']}}", "0-" + nestedOnly},
		{"* matches the root", "{key: {files: ['*.lock']}}", "0-" + yarnOnly},
		{"both", "{key: {files: ['*.lock', '**/yarn.lock']}}", "0-" + yarnAndNested},
		{"files_commits", "{key: {files_commits: [package-lock.json, yarn.lock]}}", "0-" + commitsAC},
		{"files_commits of a directory", "{key: {files_commits: [web], prefix: web}}", "web-" + commitA},
	} {
		res, err := Compile([]byte("job: {script: x, cache: "+c.cache+"}\n"), ctx)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := res.Jobs[0].Cache[0].Key; got != c.want {
			t.Errorf("%s: key %q, want %q", c.name, got, c.want)
		}
	}
}

// A default: cache with key:files reaches every job with the same key, read from the
// repository once; a second cache gets index 1; a pipeline without a repository is a 400
// naming the key.
func TestCacheKeyFromFilesInDefault(t *testing.T) {
	t.Parallel()
	r := &repo{blobs: map[string]string{"go.sum": strings.Repeat("1", 40)}}
	ctx := mainPush
	ctx.Repository = r
	src := "default:\n  cache:\n    - {key: {files: [go.sum]}, paths: [.cache/go]}\n    - {key: {files: [go.sum], prefix: lint}, paths: [.cache/lint]}\n" +
		"build: {script: make}\ntest: {script: make test}\n"
	res, err := Compile([]byte(src), ctx)
	if err != nil {
		t.Fatal(err)
	}
	const digest = "0a05a9e69e5757ac71c75a50418622624f042c97" // sha1("1111…")
	for _, j := range res.Jobs {
		var keys []string
		for _, c := range j.Cache {
			keys = append(keys, c.Key)
		}
		if want := []string{"0-" + digest, "lint-" + digest}; !slices.Equal(keys, want) {
			t.Errorf("%s: keys %q, want %q", j.Name, keys, want)
		}
	}
	if !slices.Equal(r.calls, []string{"blobs go.sum"}) {
		t.Errorf("repository calls %q, want go.sum's blob read once", r.calls)
	}

	_, err = Compile([]byte(src), mainPush)
	var e *Error
	if !errors.As(err, &e) || e.Key != "default:cache:key" || !strings.Contains(e.Message, "no repository") {
		t.Errorf("without a repository: %v; want a 400 at default:cache:key", err)
	}
}
