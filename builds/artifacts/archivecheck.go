package artifacts

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/jobapi/jobapi/builds"
)

// gitlab-runner sends no checksum header or field with an artifact upload (network/gitlab.go
// UploadRawArtifacts sets JOB-TOKEN and the multipart type, nothing else): the checksums it
// sends are the archive's own, the CRC-32 and sizes of every zip entry and the CRC-32 and
// length trailer of every gzip member. archiveCheck verifies them while the upload streams
// past, so that an archive damaged or cut short in transit is refused before it is stored.

// ArchiveError says an uploaded archive is damaged: a checksum or size that does not match
// its data, or a structure that ends too soon.
type ArchiveError struct {
	Format string
	Reason string
}

func (e *ArchiveError) Error() string {
	return fmt.Sprintf("the %s archive is damaged: %s", e.Format, e.Reason)
}

// archiveCheck is a writer that verifies the bytes written to it as an archive of one
// format; Close returns the verdict. A check that fails early makes the next Write fail,
// which stops the upload at once.
type archiveCheck struct {
	pw   *io.PipeWriter
	done chan error
	err  error
}

// newArchiveCheck starts a check for format; raw data has no checksum, so its check is nil.
func newArchiveCheck(format string) *archiveCheck {
	var check func(io.Reader) error
	switch format {
	case builds.ArtifactFormatZip:
		check = checkZip
	case builds.ArtifactFormatGzip:
		check = checkGzip
	default:
		return nil
	}
	pr, pw := io.Pipe()
	c := &archiveCheck{pw: pw, done: make(chan error, 1)}
	go func() {
		err := check(pr)
		if err != nil {
			var ae *ArchiveError
			if !errors.As(err, &ae) {
				err = &ArchiveError{Format: format, Reason: err.Error()}
			}
			pr.CloseWithError(err) // the writer's next Write returns err
		} else {
			_, _ = io.Copy(io.Discard, pr) // whatever follows the archive's end
		}
		c.done <- err
	}()
	return c
}

func (c *archiveCheck) Write(p []byte) (int, error) {
	return c.pw.Write(p)
}

// Close ends the data and returns the verdict (the same on every call).
func (c *archiveCheck) Close() error {
	if c.done != nil {
		_ = c.pw.Close()
		c.err = <-c.done
		c.done = nil
	}
	return c.err
}

// Abort stops a check whose data will not be completed.
func (c *archiveCheck) Abort() {
	if c.done != nil {
		_ = c.pw.CloseWithError(errors.New("upload aborted"))
		<-c.done
		c.done = nil
	}
}

// checkGzip reads every member of a gzip stream: compress/gzip checks each member's CRC-32
// and length trailer at its end.
func checkGzip(r io.Reader) error {
	zr, err := gzip.NewReader(bufio.NewReaderSize(r, 64<<10))
	if err != nil {
		return &ArchiveError{Format: builds.ArtifactFormatGzip, Reason: err.Error()}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return &ArchiveError{Format: builds.ArtifactFormatGzip, Reason: err.Error()}
	}
	return nil
}

// Zip record signatures.
const (
	zipLocalSig       = 0x04034b50
	zipCentralSig     = 0x02014b50
	zipDescriptorSig  = 0x08074b50
	zipEndSig         = 0x06054b50
	zip64EndSig       = 0x06064b50
	zip64LocatorSig   = 0x07064b50
	zipFlagEncrypted  = 0x1
	zipFlagDescriptor = 0x8
	zipStore          = 0
	zipDeflate        = 8
	zip64ExtraID      = 0x0001
	uint32Max         = 0xffffffff
)

// zipReader reads a zip stream once, front to back, counting its offset. flate reads it
// through ReadByte, so a deflate stream ends exactly where its data does.
type zipReader struct {
	br  *bufio.Reader
	off int64
}

func (z *zipReader) Read(p []byte) (int, error) {
	n, err := z.br.Read(p)
	z.off += int64(n)
	return n, err
}

func (z *zipReader) ReadByte() (byte, error) {
	b, err := z.br.ReadByte()
	if err == nil {
		z.off++
	}
	return b, err
}

func (z *zipReader) full(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(z, b)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return b, err
}

func (z *zipReader) skip(n int64) error {
	got, err := io.CopyN(io.Discard, z, n)
	if err == io.EOF || got < n {
		return io.ErrUnexpectedEOF
	}
	return err
}

// zipEntries sums up the entries seen, so that the central directory can be compared with
// them in any order without keeping a list: a count and two order-free mixes of each
// entry's offset and CRC-32.
type zipEntries struct {
	n        int64
	xor, sum uint64
}

func (e *zipEntries) add(offset int64, crc uint32) {
	v := uint64(offset)*0x9e3779b97f4a7c15 ^ uint64(crc)*0xc2b2ae3d27d4eb4f
	e.n++
	e.xor ^= v
	e.sum += v
}

func zipDamaged(format string, args ...any) error {
	return &ArchiveError{Format: builds.ArtifactFormatZip, Reason: fmt.Sprintf(format, args...)}
}

// checkZip verifies a zip archive as it streams by: each entry's CRC-32 and sizes, whether
// its header or a data descriptor after its data carries them, and a central directory and
// end record that describe the same entries. Entries whose data cannot be found without the
// central directory (stored or encrypted with a data descriptor, or compressed with another
// method) are passed over, and the check ends there: what came before was verified.
func checkZip(r io.Reader) error {
	z := &zipReader{br: bufio.NewReaderSize(r, 64<<10)}
	var local, central zipEntries
	for {
		at := z.off
		head, err := z.full(4)
		if err != nil {
			if at == 0 {
				return zipDamaged("empty upload: not a zip archive")
			}
			return zipDamaged("ends at byte %d, before the end of central directory record", at)
		}
		switch binary.LittleEndian.Uint32(head) {
		case zipLocalSig:
			if central.n > 0 {
				return zipDamaged("an entry at byte %d follows the central directory", at)
			}
			crc, ok, err := checkZipEntry(z)
			if err != nil {
				return err
			}
			if !ok {
				return nil // unverifiable from here on; see above
			}
			local.add(at, crc)
		case zipCentralSig:
			if err := readZipCentral(z, &central); err != nil {
				return err
			}
		case zip64EndSig:
			b, err := z.full(8)
			if err != nil {
				return zipDamaged("the zip64 end record is cut short")
			}
			if err := z.skip(int64(binary.LittleEndian.Uint64(b))); err != nil {
				return zipDamaged("the zip64 end record is cut short")
			}
		case zip64LocatorSig:
			if err := z.skip(16); err != nil {
				return zipDamaged("the zip64 locator is cut short")
			}
		case zipDescriptorSig:
			if at != 0 {
				return zipDamaged("a data descriptor at byte %d belongs to no entry", at)
			}
			// A split archive's marker at the very start; nothing to check.
		case zipEndSig:
			return checkZipEnd(z, local, central)
		default:
			if at == 0 {
				return zipDamaged("not a zip archive (it starts with %x)", head)
			}
			return zipDamaged("unexpected data at byte %d", at)
		}
	}
}

// checkZipEntry reads one local entry after its signature and returns its CRC-32; ok is
// false when its data cannot be delimited without the central directory.
func checkZipEntry(z *zipReader) (crc uint32, ok bool, err error) {
	start := z.off - 4
	h, err := z.full(26)
	if err != nil {
		return 0, false, zipDamaged("the entry header at byte %d is cut short", start)
	}
	flags := binary.LittleEndian.Uint16(h[2:])
	method := binary.LittleEndian.Uint16(h[4:])
	crc = binary.LittleEndian.Uint32(h[10:])
	csize := uint64(binary.LittleEndian.Uint32(h[14:]))
	usize := uint64(binary.LittleEndian.Uint32(h[18:]))
	name, err := z.full(int(binary.LittleEndian.Uint16(h[22:])))
	if err != nil {
		return 0, false, zipDamaged("the entry header at byte %d is cut short", start)
	}
	extra, err := z.full(int(binary.LittleEndian.Uint16(h[24:])))
	if err != nil {
		return 0, false, zipDamaged("the entry header of %q is cut short", name)
	}
	zip64 := false
	if f, found := zipExtraField(extra, zip64ExtraID); found {
		zip64 = true
		// Only the sizes the header marks as too large are in the field, in this order.
		for _, v := range []*uint64{&usize, &csize} {
			if *v == uint32Max && len(f) >= 8 {
				*v = binary.LittleEndian.Uint64(f)
				f = f[8:]
			}
		}
	}
	descriptor := flags&zipFlagDescriptor != 0
	verifiable := flags&zipFlagEncrypted == 0 && (method == zipStore || method == zipDeflate)
	switch {
	case !descriptor && !verifiable:
		if err := z.skip(int64(csize)); err != nil {
			return 0, false, zipDamaged("the data of %q is cut short", name)
		}
		return crc, true, nil
	case descriptor && (!verifiable || method == zipStore):
		return 0, false, nil
	}

	h32 := crc32.NewIEEE()
	dataStart := z.off
	var n int64
	if method == zipStore {
		n, err = io.CopyN(h32, z, int64(csize))
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	} else {
		fr := flate.NewReader(z)
		n, err = io.Copy(h32, fr)
		_ = fr.Close()
	}
	if err != nil {
		return 0, false, zipDamaged("the data of %q is damaged: %v", name, err)
	}
	compressed := uint64(z.off - dataStart)
	if descriptor {
		if crc, csize, usize, err = readZipDescriptor(z, zip64, compressed, uint64(n)); err != nil {
			return 0, false, zipDamaged("the data descriptor of %q: %v", name, err)
		}
	}
	switch {
	case compressed != csize:
		return 0, false, zipDamaged("%q takes %d bytes, its header says %d", name, compressed, csize)
	case uint64(n) != usize:
		return 0, false, zipDamaged("%q holds %d bytes, its header says %d", name, n, usize)
	case h32.Sum32() != crc:
		return 0, false, zipDamaged("%q has CRC-32 %08x, its header says %08x", name, h32.Sum32(), crc)
	}
	return crc, true, nil
}

// readZipDescriptor reads the data descriptor after an entry's data: an optional signature,
// the CRC-32 and the two sizes, 4 bytes each, or 8 when the entry is zip64 (its header has
// the zip64 field, or, as Go's writer does for entries past 4 GiB, the 4-byte reading does
// not match the data).
func readZipDescriptor(z *zipReader, zip64 bool, compressed, uncompressed uint64) (crc uint32, csize, usize uint64, err error) {
	b, err := z.full(4)
	if err != nil {
		return 0, 0, 0, err
	}
	if binary.LittleEndian.Uint32(b) == zipDescriptorSig {
		if b, err = z.full(4); err != nil {
			return 0, 0, 0, err
		}
	}
	crc = binary.LittleEndian.Uint32(b)
	sizes, err := z.full(8)
	if err != nil {
		return 0, 0, 0, err
	}
	csize, usize = uint64(binary.LittleEndian.Uint32(sizes)), uint64(binary.LittleEndian.Uint32(sizes[4:]))
	if !zip64 && csize == compressed && usize == uncompressed {
		return crc, csize, usize, nil
	}
	more, err := z.full(8)
	if err != nil {
		return 0, 0, 0, err
	}
	return crc, binary.LittleEndian.Uint64(sizes), binary.LittleEndian.Uint64(more), nil
}

// readZipCentral reads one central directory header after its signature.
func readZipCentral(z *zipReader, central *zipEntries) error {
	h, err := z.full(42)
	if err != nil {
		return zipDamaged("the central directory is cut short")
	}
	crc := binary.LittleEndian.Uint32(h[12:])
	usize := binary.LittleEndian.Uint32(h[20:])
	csize := binary.LittleEndian.Uint32(h[16:])
	offset := uint64(binary.LittleEndian.Uint32(h[38:]))
	rest, err := z.full(int(binary.LittleEndian.Uint16(h[24:])) + int(binary.LittleEndian.Uint16(h[26:])) +
		int(binary.LittleEndian.Uint16(h[28:])))
	if err != nil {
		return zipDamaged("the central directory is cut short")
	}
	nameLen := int(binary.LittleEndian.Uint16(h[24:]))
	extra := rest[nameLen : nameLen+int(binary.LittleEndian.Uint16(h[26:]))]
	if f, ok := zipExtraField(extra, zip64ExtraID); ok {
		// usize, csize, offset: each present only when its 4-byte field is all ones.
		if usize == uint32Max && len(f) >= 8 {
			f = f[8:]
		}
		if csize == uint32Max && len(f) >= 8 {
			f = f[8:]
		}
		if offset == uint32Max && len(f) >= 8 {
			offset = binary.LittleEndian.Uint64(f)
		}
	}
	central.add(int64(offset), crc)
	return nil
}

// checkZipEnd reads the end of central directory record after its signature and compares
// the central directory with the entries seen.
func checkZipEnd(z *zipReader, local, central zipEntries) error {
	h, err := z.full(18)
	if err != nil {
		return zipDamaged("the end of central directory record is cut short")
	}
	if err := z.skip(int64(binary.LittleEndian.Uint16(h[16:]))); err != nil {
		return zipDamaged("the archive comment is cut short")
	}
	if n := binary.LittleEndian.Uint16(h[6:]); n != 0xffff && int64(n) != central.n%0x10000 {
		return zipDamaged("the end record counts %d entries, the central directory holds %d", n, central.n)
	}
	if local != central {
		return zipDamaged("the central directory (%d entries) does not describe the %d entries of the archive", central.n, local.n)
	}
	return nil
}

// zipExtraField returns the data of the extra field with id.
func zipExtraField(extra []byte, id uint16) ([]byte, bool) {
	for len(extra) >= 4 {
		tag := binary.LittleEndian.Uint16(extra)
		size := int(binary.LittleEndian.Uint16(extra[2:]))
		if len(extra) < 4+size {
			return nil, false
		}
		if tag == id {
			return extra[4 : 4+size], true
		}
		extra = extra[4+size:]
	}
	return nil, false
}
