package main

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jobapi/jobapi/runnerclient"
)

// artifacts: one archive of --artifact-size (1 GB) through jobapi as gitlab-runner moves it:
// the build job uploads it (multipart, chunked, from the file), the next stage's job
// downloads it with its own token into a file. Each transfer's MB/s is set against a plain
// copy of the same file on the same disk (with the fsync the directory store does), and
// the peak RSS of the bench process (jobapi and the runner's client, both streaming) is
// measured over each transfer: the target is under 150 MB.
func (e *env) artifacts(ctx context.Context) (*Result, error) {
	size := e.cfg.ArtifactSize
	dir, err := os.MkdirTemp("", "jobapi-bench-artifacts-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "artifacts.zip")
	start := time.Now()
	sum, zipSize, err := writeArchive(archive, size)
	if err != nil {
		return nil, fmt.Errorf("write the archive: %w", err)
	}
	e.logf("  a %.0f MB archive written in %s", float64(zipSize)/1e6, time.Since(start).Round(100*time.Millisecond))
	copyTime, err := copyFile(archive, filepath.Join(dir, "copy.zip"))
	if err != nil {
		return nil, fmt.Errorf("plain copy: %w", err)
	}
	_ = os.Remove(filepath.Join(dir, "copy.zip"))

	// A pipeline of two jobs for a runner of their own (a tag nothing else carries).
	tag := "bench-artifacts-" + randHex(4)
	ci := fmt.Sprintf("stages: [build, test]\nbuild:\n  stage: build\n  tags: [%s]\n  script: make\n"+
		"  artifacts:\n    paths: [dist/]\n    expire_in: 1 day\ntest:\n  stage: test\n  tags: [%[1]s]\n  script: make test\n", tag)
	if err := e.admin(ctx, http.MethodPost, "/api/v4/projects/1/pipeline", map[string]any{"ref": "main", "ci_config": ci}, nil); err != nil {
		return nil, err
	}
	rs, err := e.newRunners(ctx, 1, []string{tag})
	if err != nil {
		return nil, err
	}
	r := e.fresh(rs)[0]
	defer r.CloseIdleConnections()
	build, err := e.takeJob(ctx, r.Client, "build")
	if err != nil {
		return nil, err
	}

	rec := newRecorder()
	open := func() (io.ReadCloser, error) { return os.Open(archive) }
	w := e.startWindow("artifacts upload", true)
	start = time.Now()
	up, err := r.UploadArtifacts(ctx, build, open, runnerclient.ArtifactsOptions{BaseName: "artifacts.zip",
		Format: runnerclient.ArtifactFormatZip, Type: runnerclient.ArtifactTypeArchive, ExpireIn: "1 day"})
	upTime := time.Since(start)
	upRes := w.stop()
	switch {
	case err != nil:
		rec.fail("upload", err)
	case up.State != runnerclient.UploadSucceeded:
		rec.fail("upload", fmt.Errorf("HTTP %d: %s", up.Code, up.Message))
	default:
		rec.add("upload", upTime)
	}
	if _, err := r.UpdateJob(ctx, build, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil {
		return nil, err
	}

	test, err := e.takeJob(ctx, r.Client, "test")
	if err != nil {
		return nil, err
	}
	var dep *runnerclient.Dependency
	for i := range test.Dependencies {
		if test.Dependencies[i].ID == build.ID && test.Dependencies[i].ArtifactsFile.Filename != "" {
			dep = &test.Dependencies[i]
		}
	}
	if dep == nil {
		return nil, fmt.Errorf("the test job's payload lists no archive of the build job: %+v", test.Dependencies)
	}
	out, err := os.Create(filepath.Join(dir, "downloaded.zip"))
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	w = e.startWindow("artifacts download", true)
	start = time.Now()
	down, err := r.DownloadArtifacts(ctx, *dep, io.MultiWriter(out, h), nil)
	downTime := time.Since(start)
	downRes := w.stop()
	_ = out.Close()
	switch {
	case err != nil:
		rec.fail("download", err)
	case down.State != runnerclient.DownloadSucceeded:
		rec.fail("download", fmt.Errorf("HTTP %d: %s", down.Code, down.Message))
	case !bytes.Equal(h.Sum(nil), sum):
		rec.fail("download", errors.New("downloaded bytes differ from the uploaded archive"))
	default:
		rec.add("download", downTime)
	}
	if _, err := r.UpdateJob(ctx, test, runnerclient.StateSuccess, runnerclient.UpdateOptions{}); err != nil {
		return nil, err
	}

	mbps := func(d time.Duration) float64 { return round3(float64(zipSize) / 1e6 / d.Seconds()) }
	res := upRes
	res.PeakRSSMB = max(upRes.PeakRSSMB, downRes.PeakRSSMB)
	res.WallSeconds = round3(upRes.WallSeconds + downRes.WallSeconds)
	res.ProcessCPU = round3(upRes.ProcessCPU + downRes.ProcessCPU)
	res.ServerCPU = round3(upRes.ServerCPU + downRes.ServerCPU)
	result := e.result("artifacts", res, rec)
	result.Unit = "MB/s up"
	result.Count = rec.count("upload") + rec.count("download")
	result.Throughput = mbps(upTime)
	result.Params = map[string]any{"archive_mb": round3(float64(zipSize) / 1e6), "object_store": e.objectStore}
	result.Extra["upload_mb_per_s"] = mbps(upTime)
	result.Extra["download_mb_per_s"] = mbps(downTime)
	result.Extra["file_copy_mb_per_s"] = mbps(copyTime)
	result.Extra["upload_to_copy"] = round3(copyTime.Seconds() / upTime.Seconds())
	result.Extra["download_to_copy"] = round3(copyTime.Seconds() / downTime.Seconds())
	result.Extra["upload_peak_rss_mb"] = upRes.PeakRSSMB
	result.Extra["download_peak_rss_mb"] = downRes.PeakRSSMB
	result.Extra["upload_server_cpu_s"] = upRes.ServerCPU
	result.Extra["download_server_cpu_s"] = downRes.ServerCPU
	for _, t := range []struct {
		what string
		res  Resources
	}{{"upload", upRes}, {"download", downRes}} {
		result.Targets = append(result.Targets, Target{
			Name: fmt.Sprintf("peak RSS during the %.0f MB %s (bench process: jobapi and the runner's client)", float64(zipSize)/1e6, t.what),
			Want: "< 150 MB", Got: t.res.PeakRSSMB, Unit: "MB", Met: t.res.PeakRSSMB > 0 && t.res.PeakRSSMB < 150})
	}
	return result, nil
}

// takeJob asks for a job until one comes, acknowledges it (the bench runs with two-phase on)
// and requires it to be the named one.
func (e *env) takeJob(ctx context.Context, c *runnerclient.Client, name string) (*runnerclient.Job, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		job, res, err := c.RequestJob(ctx)
		if err != nil {
			return nil, err
		}
		if job != nil {
			if job.JobInfo.Name != name {
				return nil, fmt.Errorf("got job %q, want %q", job.JobInfo.Name, name)
			}
			if ack, err := c.UpdateJob(ctx, job, runnerclient.StateRunning, runnerclient.UpdateOptions{}); err != nil || ack.Code != http.StatusOK {
				return nil, fmt.Errorf("ack of %s: %d %v", name, ack.Code, err)
			}
			return job, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no %s job within 30 s (last answer %d)", name, res.Code)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// writeArchive writes a zip holding n bytes of incompressible data, as the runner's archiver
// would for built binaries, and returns its SHA-256 and size. Deflate at its fastest level
// stores such data: the archive is n bytes and a few hundred more.
func writeArchive(path string, n int64) ([]byte, int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	h := sha256.New()
	zw := zip.NewWriter(io.MultiWriter(f, h))
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestSpeed) })
	fw, err := zw.CreateHeader(&zip.FileHeader{Name: "dist/app.bin", Method: zip.Deflate, Flags: 0x800})
	if err != nil {
		return nil, 0, err
	}
	src := rand.NewChaCha8([32]byte{42})
	buf := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), left)]
		_, _ = src.Read(chunk)
		if _, err := fw.Write(chunk); err != nil {
			return nil, 0, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	return h.Sum(nil), fi.Size(), f.Sync()
}

// copyFile copies src to dst and syncs it: what the directory store's Put does with the
// bytes, without HTTP, multipart, hashing or checking.
func copyFile(src, dst string) (time.Duration, error) {
	start := time.Now()
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	_, err = io.CopyBuffer(out, in, make([]byte, 256<<10))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return time.Since(start), err
}
