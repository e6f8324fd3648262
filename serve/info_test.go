package serve

// The tests read one kind's Info as the front ends do (serve/resp's
// infoOf): a key of another kind is ErrWrongType.

func (s *Store) infoOf(name string, kinds ...Kind) (Info, error) {
	info, err := s.Info(name)
	if err != nil {
		return info, err
	}
	for _, k := range kinds {
		if info.Kind == k {
			return info, nil
		}
	}
	return Info{}, ErrWrongType
}

func (s *Store) bloomInfo(name string) (BloomInfo, error) {
	info, err := s.infoOf(name, KindBloom, KindSet)
	return info.Bloom, err
}

func (s *Store) cuckooInfo(name string) (CuckooInfo, error) {
	info, err := s.infoOf(name, KindCuckoo)
	return info.Cuckoo, err
}

func (s *Store) expiringInfo(name string) (ExpiringInfo, error) {
	info, err := s.infoOf(name, KindExpiring)
	return info.Expiring, err
}
