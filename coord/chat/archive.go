package chat

import (
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// archiveExt ends the name of an archive: <conv>.<unix seconds>.jsonl.gz,
// the seconds being when it was archived, or <conv>.<unix seconds>-<n>.jsonl.gz
// for the n-th archive of the conversation in the same second.
const archiveExt = ".jsonl.gz"

// ArchiveIdle archives each conversation without a turn under way or
// waiting whose last message is older than cutoff: its timeline is
// gzipped into ArchiveDir and its folder removed. It returns the ids.
func (e *Engine) ArchiveIdle(cutoff time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var done []string
	for id, c := range e.convs {
		if c.st.Live != nil || len(c.st.Queue) > 0 || !c.st.Updated.Before(cutoff) {
			continue
		}
		name, err := e.archive(id, filepath.Join(c.dir, timelineFile))
		if err != nil {
			e.cfg.Logger.Error("chat: cannot archive a timeline", "conv", id, "err", err)
			continue
		}
		if err := e.cfg.Files.RemoveAll(c.dir); err != nil {
			e.cfg.Logger.Error("chat: cannot remove an archived conversation", "conv", id, "err", err)
		}
		delete(e.convs, id)
		done = append(done, id)
		e.cfg.Emit("conv.archived", map[string]any{"conv": id, "archive": name, "rolled": false})
	}
	return done
}

// record adds m to c's timeline. A timeline grown past MaxTimeline is
// archived whole and starts anew; message ids go on.
func (e *Engine) record(c *conv, m *Message) error {
	if err := c.appendMessage(m, e.cfg.Clock.Now()); err != nil {
		return err
	}
	path := filepath.Join(c.dir, timelineFile)
	if info, err := os.Stat(path); err != nil || info.Size() <= e.cfg.MaxTimeline {
		return err
	}
	name, err := e.archive(c.st.ID, path)
	if err != nil {
		return err
	}
	e.cfg.Emit("conv.archived", map[string]any{"conv": c.st.ID, "archive": name, "rolled": true})
	return e.cfg.Files.Remove(path)
}

// archive writes timeline src of conversation conv gzipped into a new
// archive, never over an earlier one, and returns its name; a missing src
// (a conversation without messages) makes an empty archive.
func (e *Engine) archive(conv, src string) (string, error) {
	stamp := strconv.FormatInt(e.cfg.Clock.Now().Unix(), 10)
	for n := 1; ; n++ {
		name := conv + "." + stamp + archiveExt
		if n > 1 {
			name = conv + "." + stamp + "-" + strconv.Itoa(n) + archiveExt
		}
		err := e.cfg.Files.Create(filepath.Join(e.cfg.ArchiveDir, name), 0o644, func(w io.Writer) error { return gzipTo(w, src) })
		if !errors.Is(err, fs.ErrExist) {
			return name, err
		}
	}
}

// gzipTo writes src gzipped to w; a missing src writes an empty stream.
func gzipTo(w io.Writer, src string) error {
	zw := gzip.NewWriter(w)
	in, err := os.Open(src)
	if err == nil {
		_, err = io.Copy(zw, in)
		in.Close()
	} else if os.IsNotExist(err) {
		err = nil
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

// archive is one archive file.
type archive struct {
	name     string
	size     int64
	archived time.Time
}

func (e *Engine) archives() []archive {
	entries, _ := os.ReadDir(e.cfg.ArchiveDir)
	var out []archive
	for _, en := range entries {
		base, ok := strings.CutSuffix(en.Name(), archiveExt)
		i := strings.LastIndexByte(base, '.')
		if !ok || i < 0 {
			continue
		}
		stamp, _, _ := strings.Cut(base[i+1:], "-") // <seconds>[-<n>]
		secs, err := strconv.ParseInt(stamp, 10, 64)
		info, ierr := en.Info()
		if err != nil || ierr != nil {
			continue
		}
		out = append(out, archive{name: en.Name(), size: info.Size(), archived: time.Unix(secs, 0).UTC()})
	}
	return out
}

// PruneArchives deletes the archives made before cutoff.
func (e *Engine) PruneArchives(cutoff time.Time) []string {
	var gone []string
	for _, a := range e.archives() {
		if a.archived.Before(cutoff) {
			if err := e.cfg.Files.Remove(filepath.Join(e.cfg.ArchiveDir, a.name)); err != nil {
				e.cfg.Logger.Error("chat: cannot delete an archive", "archive", a.name, "err", err)
				continue
			}
			gone = append(gone, a.name)
		}
	}
	return gone
}

// Storage is what the conversations keep on disk.
type Storage struct {
	Conversations int        `json:"conversations"`
	TimelineBytes int64      `json:"timeline_bytes"`
	UploadBytes   int64      `json:"upload_bytes"`
	Archives      int        `json:"archives"`
	ArchiveBytes  int64      `json:"archive_bytes"`
	OldestArchive *time.Time `json:"oldest_archive"`
}

// Storage measures what the conversations and archives take.
func (e *Engine) Storage() Storage {
	e.mu.Lock()
	dirs := make([]string, 0, len(e.convs))
	for _, c := range e.convs {
		dirs = append(dirs, c.dir)
	}
	e.mu.Unlock()
	s := Storage{Conversations: len(dirs)}
	for _, dir := range dirs {
		if info, err := os.Stat(filepath.Join(dir, timelineFile)); err == nil {
			s.TimelineBytes += info.Size()
		}
		filepath.WalkDir(filepath.Join(dir, uploadsDir), func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					s.UploadBytes += info.Size()
				}
			}
			return nil
		})
	}
	for _, a := range e.archives() {
		s.Archives++
		s.ArchiveBytes += a.size
		if s.OldestArchive == nil || a.archived.Before(*s.OldestArchive) {
			t := a.archived
			s.OldestArchive = &t
		}
	}
	return s
}
