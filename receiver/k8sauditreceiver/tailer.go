package k8sauditreceiver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/kubetrail/kubetrail/internal/auditconv"
	"github.com/kubetrail/kubetrail/internal/retry"
	"github.com/kubetrail/kubetrail/receiver/k8sauditreceiver/internal/metadata"
)

const (
	// maxBatchLines matches the apiserver's own webhook batches (--audit-webhook-batch-max-size
	// defaults to 400): file mode then loads the pipeline the way webhook mode does.
	maxBatchLines = 400
	readChunk     = 256 << 10
	// maxLineBytes bounds one audit log line. A RequestResponse event of a large ConfigMap
	// can be a few MiB; a line without a newline beyond this is not an audit event.
	maxLineBytes = 16 << 20
	// fingerprintBytes of a file's head tell a file from another one that reused its inode.
	fingerprintBytes = 256
	minRetryDelay    = 100 * time.Millisecond
	maxRetryDelay    = 5 * time.Second
)

// checkpoint is what the storage extension keeps per file: which file (inode and a hash of
// its head) and how far its complete, accepted lines go.
type checkpoint struct {
	Inode       uint64 `json:"inode"`
	Device      uint64 `json:"device,omitempty"` // absent in checkpoints of earlier versions
	Offset      int64  `json:"offset"`
	Fingerprint string `json:"fingerprint"` // hex sha256 of the first min(offset, 256) bytes
}

// tailer follows one audit log file: new lines, rename-and-create rotation, truncation. Its
// offset only ever covers lines the pipeline accepted (or that can never be accepted), so a
// restart from the checkpoint neither loses nor, beyond a batch in flight, repeats events.
type tailer struct {
	path    string
	client  storage.Client // nil: no checkpoints
	key     string
	logger  *zap.Logger
	consume func(ctx context.Context, events []auditconv.Event) error
	// conv is the converter the events go to: lines are decoded as it reads them (decodeLine).
	conv *auditconv.Converter
	// telemetry counts the lines read and the ones dropped.
	telemetry    *metadata.TelemetryBuilder
	pollInterval time.Duration
	startAtEnd   bool
	sleep        func(ctx context.Context, d time.Duration) bool
	started      bool // whether the file has been opened once since start

	f       *os.File
	info    fs.FileInfo
	offset  int64  // file offset of the first byte not yet accepted
	pending []byte // bytes read after offset: complete lines not yet flushed and a partial line
	skip    bool   // discarding an over-long line up to its newline
	head    string // fingerprint of the file's first headLen bytes, which appends never change
	headLen int64
	lastErr string // the last warning, so that a lasting problem is logged once, not every poll
	// warnings counts warn calls, so that a poll without any tells that a problem is over.
	warnings int
	// health reports the file's problem (nil: none) as the component's status.
	health func(error)
}

// warn logs a problem at warning level the first time in a row it happens and at debug level
// while it lasts: a missing permission would otherwise log four warnings a second.
func (t *tailer) warn(msg string, err error) {
	t.warnings++
	text := msg + ": " + err.Error()
	if text == t.lastErr {
		t.logger.Debug(msg, zap.Error(err))
		return
	}
	t.lastErr = text
	t.logger.Warn(msg, zap.Error(err))
	t.health(fmt.Errorf("%s: %s: %w", t.path, msg, err))
}

// tailerDeps is what a tailer takes from its receiver: where the events go, how it logs and
// counts, and the two settings it reads. A tailer keeps no pointer back to the receiver.
type tailerDeps struct {
	// consume hands events to the pipeline; an error that is not permanent keeps them for a retry.
	consume      func(ctx context.Context, events []auditconv.Event) error
	conv         *auditconv.Converter // the converter consume feeds, which decodeLine reads bodies for
	logger       *zap.Logger
	telemetry    *metadata.TelemetryBuilder
	pollInterval time.Duration // poll_interval
	startAtEnd   bool          // start_at: end, for a file without a checkpoint
}

func newTailer(path string, d tailerDeps, client storage.Client) *tailer {
	return &tailer{
		path:         path,
		client:       client,
		key:          "file:" + path,
		logger:       d.logger.With(zap.String("file", path)),
		consume:      d.consume,
		conv:         d.conv,
		telemetry:    d.telemetry,
		pollInterval: d.pollInterval,
		startAtEnd:   d.startAtEnd,
		sleep:        sleepCtx,
		health:       func(error) {},
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (t *tailer) run(ctx context.Context) {
	defer t.close()
	tick := time.NewTicker(t.pollInterval)
	defer tick.Stop()
	for {
		t.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (t *tailer) close() {
	if t.f != nil {
		_ = t.f.Close()
		t.f = nil
	}
}

// poll reads what was appended since the last poll and follows rotation and truncation.
func (t *tailer) poll(ctx context.Context) {
	warned := t.warnings
	defer func() {
		if t.warnings == warned && t.lastErr != "" {
			t.lastErr = ""
			t.logger.Info("The audit log is readable again")
			t.health(nil)
		}
	}()
	if t.f == nil && !t.open(ctx) {
		return
	}
	// Truncation is checked before reading: at the old offset of a rewritten file the reader
	// would start in the middle of new content.
	if t.truncated() && !t.rewind(ctx) {
		return
	}
	if !t.readAll(ctx) {
		return
	}
	cur, err := os.Stat(t.path)
	switch {
	case err == nil && os.SameFile(cur, t.info):
		t.info = cur
	case err == nil || errors.Is(err, fs.ErrNotExist):
		// Renamed away (and maybe already replaced): the old file is complete once read to
		// its end again (the writer may have appended between the read and the rename), so
		// its last partial line, if any, is all there will ever be of it.
		if !t.finishFile(ctx) {
			return
		}
		t.logger.Info("Audit log rotated, following the new file")
		t.close()
		t.offset, t.pending, t.skip = 0, t.pending[:0], false
		if err == nil && t.open(ctx) {
			t.readAll(ctx)
		}
	default:
		t.warn("Checking the audit log for rotation failed", err)
	}
}

// truncated reports whether the open file was truncated in place (copytruncate): it is shorter
// than what was read, or its head, which appends never change, is different.
func (t *tailer) truncated() bool {
	info, err := t.f.Stat()
	if err != nil {
		return false
	}
	return info.Size() < t.offset+int64(len(t.pending)) || t.headChanged()
}

// rewind reads a truncated file again from its start: what is there now is new.
func (t *tailer) rewind(ctx context.Context) bool {
	t.logger.Info("Audit log truncated, reading from the start", zap.Int64("old_offset", t.offset))
	t.offset, t.pending, t.skip = 0, t.pending[:0], false
	t.head, t.headLen = "", 0
	if _, err := t.f.Seek(0, io.SeekStart); err != nil {
		t.logger.Warn("Seeking to the start after truncation failed", zap.Error(err))
		t.close()
		return false
	}
	t.save(ctx)
	return true
}

// open opens the file and decides where to start: at the checkpoint when it names this very
// file, at the end when there is no storage and the file existed at start, else at the start.
func (t *tailer) open(ctx context.Context) bool {
	f, err := os.Open(t.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.warn("Opening the audit log failed", err)
		}
		t.started = true // a file created later is new: read it whole
		return false
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		t.warn("Reading the audit log's metadata failed", err)
		return false
	}
	first := !t.started
	t.started = true
	t.f, t.info, t.pending, t.skip = f, info, t.pending[:0], false
	t.offset, t.head, t.headLen = 0, "", 0
	if first {
		cp, ok := checkpoint{}, false
		if t.client != nil {
			cp, ok = t.load(ctx)
		}
		switch {
		case ok && t.matches(cp, info):
			t.offset = cp.Offset
			t.logger.Info("Resuming the audit log from its checkpoint", zap.Int64("offset", cp.Offset))
		case ok:
			if !t.catchUp(ctx, cp, info) {
				t.close()
				return false
			}
		case t.startAtEnd:
			t.offset = info.Size()
			t.logger.Info("No checkpoint for the audit log, reading from its end", zap.Int64("offset", t.offset))
			// Checkpoint the end now, not with the first line read: a collector stopped before
			// its first line would otherwise start at the end again, past what was written
			// while it was down.
			t.save(ctx)
		}
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		t.warn("Seeking in the audit log failed", err)
		t.close()
		return false
	}
	t.updateHead()
	return true
}

// finishFile reads a file that is no longer written (it was renamed away) to its end and
// flushes its last line even without a newline: it is all there will ever be of it.
func (t *tailer) finishFile(ctx context.Context) bool {
	if !t.readAll(ctx) {
		return false
	}
	if len(t.pending) > 0 && !t.skip {
		events := t.decodeLines([][]byte{t.pending})
		if !t.flush(ctx, events, t.offset+int64(len(t.pending))) {
			return false
		}
	}
	return true
}

// catchUp runs at start when the checkpoint names another file than the one at the path: the
// log was rotated while the collector was stopped. It finds the checkpointed file among the
// rotated files next to the path by its identity (device, inode and the fingerprint of its
// head), reads it from the checkpoint to its end, then reads whole every rotated file written
// after it (more rotations while stopped), oldest first. The tailer is left on the current file,
// at its start. It returns false when shutdown came first; the checkpoint then still points
// into the rotated file, so the next start goes on from there.
func (t *tailer) catchUp(ctx context.Context, cp checkpoint, current fs.FileInfo) bool {
	old := t.findRotated(cp, current)
	if old == nil {
		t.logger.Warn("The checkpointed audit log was rotated away while stopped and is not next to it any more (deleted, compressed or moved): the rest of it is lost, reading the current file from its start",
			zap.Int64("checkpoint_offset", cp.Offset))
		return true
	}
	cur, curInfo := t.f, t.info
	for i, r := range old {
		offset := int64(0)
		if i == 0 {
			offset = cp.Offset
		}
		t.logger.Info("Reading an audit log rotated while the collector was stopped",
			zap.String("rotated", r.path), zap.Int64("offset", offset))
		t.f, t.info, t.offset, t.pending, t.skip, t.head, t.headLen = r.f, r.info, offset, t.pending[:0], false, "", 0
		if _, err := r.f.Seek(offset, io.SeekStart); err != nil {
			t.warn("Seeking in a rotated audit log failed, skipping it", err)
			_ = r.f.Close()
			continue
		}
		t.updateHead()
		if !t.finishFile(ctx) {
			for _, rest := range old[i:] {
				_ = rest.f.Close()
			}
			t.f, t.info = cur, curInfo
			return false
		}
		_ = r.f.Close()
	}
	// From now on the current file is the one: checkpoint its start, so that a restart before its
	// first line does not look for the rotated files again.
	t.f, t.info = cur, curInfo
	t.offset, t.pending, t.skip, t.head, t.headLen = 0, t.pending[:0], false, "", 0
	t.save(ctx)
	return true
}

type rotatedFile struct {
	path string
	f    *os.File
	info fs.FileInfo
}

// rotatedName reports whether name is a rotation of base: base.1, base-20261125 (logrotate),
// or stem-<timestamp>.ext (the apiserver's --audit-log-maxsize rotation of stem.ext). Compressed
// rotations cannot be read and are left out.
func rotatedName(name, base string) bool {
	if name == base {
		return false
	}
	for _, z := range []string{".gz", ".bz2", ".xz", ".zst", ".zip"} {
		if strings.HasSuffix(name, z) {
			return false
		}
	}
	if strings.HasPrefix(name, base+".") || strings.HasPrefix(name, base+"-") {
		return true
	}
	ext := filepath.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	return ext != "" && strings.HasPrefix(name, stem+"-") && strings.HasSuffix(name, ext) && len(name) > len(stem)+1+len(ext)
}

// findRotated returns the checkpointed file, open, followed by the rotated files modified after
// it, oldest first; nil when the checkpointed file is not among the rotated files.
func (t *tailer) findRotated(cp checkpoint, current fs.FileInfo) []rotatedFile {
	dir, base := filepath.Split(t.path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.logger.Warn("Listing the audit log's directory for rotated files failed", zap.Error(err))
		return nil
	}
	var found *rotatedFile
	var later []rotatedFile
	for _, e := range entries {
		if !e.Type().IsRegular() || !rotatedName(e.Name(), base) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		info, err := f.Stat()
		if err != nil || os.SameFile(info, current) {
			_ = f.Close()
			continue
		}
		r := rotatedFile{path: path, f: f, info: info}
		switch {
		case found == nil && identical(cp, f, info):
			found = &r
		default:
			later = append(later, r)
		}
	}
	if found == nil {
		for _, r := range later {
			_ = r.f.Close()
		}
		return nil
	}
	out := []rotatedFile{*found}
	for _, r := range later {
		if r.info.ModTime().After(found.info.ModTime()) {
			out = append(out, r)
		} else {
			_ = r.f.Close()
		}
	}
	slices.SortStableFunc(out[1:], func(a, b rotatedFile) int { return a.info.ModTime().Compare(b.info.ModTime()) })
	return out
}

// identical reports whether f is the file a checkpoint was taken of: same device and inode
// where the platform has them (and the checkpoint recorded them), at least as long, and the
// same head.
func identical(cp checkpoint, f *os.File, info fs.FileInfo) bool {
	if ino, ok := inode(info); ok && cp.Inode != 0 && ino != cp.Inode {
		return false
	}
	if dev, ok := device(info); ok && cp.Device != 0 && dev != cp.Device {
		return false
	}
	if info.Size() < cp.Offset {
		return false
	}
	fp, err := fingerprintOf(f, cp.Offset)
	return err == nil && fp == cp.Fingerprint
}

// readAll reads and flushes complete lines until the end of the file. It returns false when
// the pipeline kept refusing until shutdown.
func (t *tailer) readAll(ctx context.Context) bool {
	buf := make([]byte, readChunk)
	for {
		n, err := t.f.Read(buf)
		if n > 0 {
			t.pending = append(t.pending, buf[:n]...)
			if !t.flushLines(ctx) {
				return false
			}
		}
		if err != nil || n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				t.warn("Reading the audit log failed", err)
			}
			return true
		}
	}
}

// flushLines hands every complete line in pending to the pipeline, maxBatchLines at a time,
// and keeps the trailing partial line for the next read.
func (t *tailer) flushLines(ctx context.Context) bool {
	for {
		var lines [][]byte
		consumed := 0
		rest := t.pending
		for len(lines) < maxBatchLines {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			line := rest[:i]
			rest = rest[i+1:]
			consumed += i + 1
			if t.skip {
				t.skip = false // the over-long line ends here
				continue
			}
			if len(bytes.TrimSpace(line)) > 0 {
				lines = append(lines, line)
			}
		}
		if consumed == 0 {
			if len(t.pending) > maxLineBytes {
				addWithReason(ctx, t.telemetry.K8sAuditDroppedEvents, 1, reasonLineTooLong)
				t.logger.Warn("Dropping an audit log line longer than the limit", zap.Int("limit", maxLineBytes))
				t.offset += int64(len(t.pending))
				t.pending, t.skip = t.pending[:0], true
			}
			return true
		}
		events := t.decodeLines(lines)
		if !t.flush(ctx, events, t.offset+int64(consumed)) {
			return false
		}
		t.pending = append(t.pending[:0], t.pending[consumed:]...)
	}
}

func (t *tailer) decodeLines(lines [][]byte) []auditconv.Event {
	t.telemetry.K8sAuditFileLines.Add(context.Background(), int64(len(lines)))
	events := make([]auditconv.Event, 0, len(lines))
	bad := 0
	for _, line := range lines {
		ev, err := t.conv.DecodeLine(line)
		if err != nil {
			bad++
			t.logger.Debug("Skipping an audit log line that is not an audit event", zap.Error(err))
			continue
		}
		events = append(events, ev)
	}
	addWithReason(context.Background(), t.telemetry.K8sAuditDroppedEvents, bad, reasonMalformedLine)
	return events
}

// flush hands events to the pipeline, retrying with backoff while it refuses, and advances
// the checkpoint to end once they are accepted. A permanent refusal also advances it: the
// same events would be refused forever.
func (t *tailer) flush(ctx context.Context, events []auditconv.Event, end int64) bool {
	retries := retry.Exponential(minRetryDelay, maxRetryDelay)
	for len(events) > 0 {
		err := t.consume(ctx, events)
		if err == nil {
			break
		}
		if consumererror.IsPermanent(err) {
			t.logger.Warn("The pipeline refused audit events permanently, skipping them", zap.Int("events", len(events)), zap.Error(err))
			break
		}
		delay := retries.Step()
		t.logger.Debug("The pipeline refused audit events, retrying", zap.Duration("delay", delay), zap.Error(err))
		if !t.sleep(ctx, delay) {
			return false
		}
	}
	t.offset = end
	t.updateHead()
	t.save(ctx)
	return true
}

// updateHead fingerprints the file's head once the accepted data covers more of it.
func (t *tailer) updateHead() {
	n := min(t.offset, fingerprintBytes)
	if n <= t.headLen || t.f == nil {
		return
	}
	if fp, err := t.fingerprint(n); err == nil {
		t.head, t.headLen = fp, n
	}
}

// headChanged reports whether the file's head differs from what was read: it was rewritten.
func (t *tailer) headChanged() bool {
	if t.headLen == 0 {
		return false
	}
	fp, err := t.fingerprint(t.headLen)
	return err == nil && fp != t.head
}

func (t *tailer) load(ctx context.Context) (checkpoint, bool) {
	data, err := t.client.Get(ctx, t.key)
	if err != nil {
		t.logger.Warn("Reading the audit log checkpoint failed, starting at the beginning", zap.Error(err))
		return checkpoint{}, false
	}
	if data == nil {
		return checkpoint{}, false
	}
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		t.logger.Warn("Ignoring an unreadable audit log checkpoint", zap.Error(err))
		return checkpoint{}, false
	}
	return cp, true
}

func (t *tailer) matches(cp checkpoint, info fs.FileInfo) bool {
	return identical(cp, t.f, info)
}

func (t *tailer) fingerprint(upTo int64) (string, error) { return fingerprintOf(t.f, upTo) }

func fingerprintOf(f *os.File, upTo int64) (string, error) {
	n := min(upTo, fingerprintBytes)
	head := make([]byte, n)
	k, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	sum := sha256.Sum256(head[:k])
	return hex.EncodeToString(sum[:]), nil
}

func (t *tailer) save(ctx context.Context) {
	if t.client == nil || t.f == nil {
		return
	}
	fp, err := t.fingerprint(t.offset)
	if err != nil {
		t.logger.Warn("Fingerprinting the audit log failed, checkpoint not saved", zap.Error(err))
		return
	}
	ino, _ := inode(t.info)
	dev, _ := device(t.info)
	data, _ := json.Marshal(checkpoint{Inode: ino, Device: dev, Offset: t.offset, Fingerprint: fp})
	if err := t.client.Set(ctx, t.key, data); err != nil {
		t.warn("Saving the audit log checkpoint failed", err)
	}
}
