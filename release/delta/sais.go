package delta

// suffixArray is the suffix array of b (qsufsort, Larsson and Sadakane,
// as bsdiff has it): len(b)+1 entries, the first the empty suffix.
func suffixArray(old []byte) []int32 {
	n := len(old)
	I := make([]int32, n+1)
	V := make([]int32, n+1)
	var buckets [256]int32
	for _, c := range old {
		buckets[c]++
	}
	for i := 1; i < 256; i++ {
		buckets[i] += buckets[i-1]
	}
	for i := 255; i > 0; i-- {
		buckets[i] = buckets[i-1]
	}
	buckets[0] = 0
	for i, c := range old {
		buckets[c]++
		I[buckets[c]] = int32(i)
	}
	I[0] = int32(n)
	for i, c := range old {
		V[i] = buckets[c]
	}
	V[n] = 0
	for i := 1; i < 256; i++ {
		if buckets[i] == buckets[i-1]+1 {
			I[buckets[i]] = -1
		}
	}
	I[0] = -1
	for h := int32(1); I[0] != -int32(n+1); h += h {
		var length int32
		i := int32(0)
		for i < int32(n+1) {
			if I[i] < 0 {
				length -= I[i]
				i -= I[i]
			} else {
				if length != 0 {
					I[i-length] = -length
				}
				length = V[I[i]] + 1 - i
				split(I, V, i, length, h)
				i += length
				length = 0
			}
		}
		if length != 0 {
			I[i-length] = -length
		}
	}
	for i := 0; i < n+1; i++ {
		I[V[i]] = int32(i)
	}
	return I
}

func split(I, V []int32, start, length, h int32) {
	for {
		if length < 16 {
			var j int32
			for k := start; k < start+length; k += j {
				j = 1
				x := V[I[k]+h]
				for i := int32(1); k+i < start+length; i++ {
					if V[I[k+i]+h] < x {
						x = V[I[k+i]+h]
						j = 0
					}
					if V[I[k+i]+h] == x {
						I[k+j], I[k+i] = I[k+i], I[k+j]
						j++
					}
				}
				for i := int32(0); i < j; i++ {
					V[I[k+i]] = k + j - 1
				}
				if j == 1 {
					I[k] = -1
				}
			}
			return
		}
		x := V[I[start+length/2]+h]
		var jj, kk int32
		for i := start; i < start+length; i++ {
			if V[I[i]+h] < x {
				jj++
			}
			if V[I[i]+h] == x {
				kk++
			}
		}
		jj += start
		kk += jj
		i, j, k := start, int32(0), int32(0)
		for i < jj {
			switch v := V[I[i]+h]; {
			case v < x:
				i++
			case v == x:
				I[i], I[jj+j] = I[jj+j], I[i]
				j++
			default:
				I[i], I[kk+k] = I[kk+k], I[i]
				k++
			}
		}
		for jj+j < kk {
			if V[I[jj+j]+h] == x {
				j++
			} else {
				I[jj+j], I[kk+k] = I[kk+k], I[jj+j]
				k++
			}
		}
		if jj > start {
			split(I, V, start, jj-start, h)
		}
		for i := int32(0); i < kk-jj; i++ {
			V[I[jj+i]] = kk - 1
		}
		if jj == kk-1 {
			I[jj] = -1
		}
		if start+length <= kk {
			return
		}
		length = start + length - kk // the right part: a loop, not a call
		start = kk
	}
}
