package coord

import (
	"net/http"
	"sync"
	"time"

	"github.com/agentmesh/mesh/coord/chat"
	"github.com/agentmesh/mesh/internal/httpx"
)

// archiveScan archives the conversations idle for ArchiveAfter and, when
// the cluster sets storage.retention_days, deletes the archives older.
func (d *Daemon) archiveScan() {
	now := d.cfg.Clock.Now()
	for _, id := range d.chat.ArchiveIdle(now.Add(-d.cfg.ArchiveAfter)) {
		d.debug("info", "storage", "conversation archived", map[string]any{"conv": id})
	}
	if days := d.current().cluster.RetentionDays; days > 0 {
		for _, name := range d.chat.PruneArchives(now.AddDate(0, 0, -days)) {
			d.debug("info", "storage", "archive deleted", map[string]any{"archive": name, "retention_days": days})
		}
	}
}

// storageReport is GET /storage, measured at most every StorageCache.
type storageReport struct {
	chat.Storage
	RetentionDays    int       `json:"retention_days"`
	ArchiveAfterDays float64   `json:"archive_after_days"`
	MeasuredAt       time.Time `json:"measured_at"`
}

type storageCache struct {
	mu     sync.Mutex
	report *storageReport
}

func (d *Daemon) storage(w http.ResponseWriter, _ *http.Request) error {
	c := &d.storageCache
	c.mu.Lock()
	defer c.mu.Unlock()
	now := d.cfg.Clock.Now().UTC()
	if c.report == nil || now.Sub(c.report.MeasuredAt) >= d.cfg.StorageCache {
		c.report = &storageReport{Storage: d.chat.Storage(), RetentionDays: d.current().cluster.RetentionDays,
			ArchiveAfterDays: d.cfg.ArchiveAfter.Hours() / 24, MeasuredAt: now}
	}
	httpx.WriteJSON(w, http.StatusOK, c.report)
	return nil
}
