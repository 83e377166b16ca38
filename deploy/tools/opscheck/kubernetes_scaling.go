package main

// Checks of the objects around the workloads: Services and PodDisruptionBudgets select real pods, an
// autoscaled Deployment leaves replicas to its autoscaler (KEDA's ScaledObjects: kubernetes_keda.go).

func podsSelected(m *manifests, selector map[string]string) []*workload {
	var out []*workload
	for _, w := range m.workloads {
		if w.Kind != "Job" && selects(selector, w.Spec.Template.Metadata.Labels) {
			out = append(out, w)
		}
	}
	return out
}

func checkServices(r *reporter, m *manifests) {
	for _, s := range m.services {
		where := "Service/" + s.Metadata.Name
		ws := podsSelected(m, s.Spec.Selector)
		if len(ws) == 0 {
			r.fail("%s: selector %v matches no Deployment's pods", where, s.Spec.Selector)
			continue
		}
		before := r.fails
		for _, p := range s.Spec.Ports {
			for _, w := range ws {
				ok := false
				for _, c := range w.Spec.Template.Spec.Containers {
					for _, cp := range c.Ports {
						switch t := p.TargetPort.(type) {
						case string:
							ok = ok || cp.Name == t
						case int:
							ok = ok || cp.ContainerPort == t
						case nil:
							ok = ok || cp.ContainerPort == p.Port
						}
					}
				}
				if !ok {
					r.fail("%s: port %s targets %v, which %s/%s does not declare", where, p.Name, p.TargetPort, w.Kind, w.Metadata.Name)
				}
			}
		}
		if r.fails == before {
			r.ok("%s: selects %s/%s and its target ports exist", where, ws[0].Kind, ws[0].Metadata.Name)
		}
	}
}

// checkScaling checks the HorizontalPodAutoscalers and the disruption budgets; kedaScaled are the Deployments KEDA
// scales (checkKEDA), whose fewest replicas the budgets must allow for like an autoscaler's.
func checkScaling(r *reporter, m *manifests, kedaScaled map[string]scaledRange) {
	scaled := map[string]int{} // Deployment -> the fewest replicas it can have
	for d, sr := range kedaScaled {
		scaled[d] = sr.min
	}
	for _, h := range m.hpas {
		where := "HorizontalPodAutoscaler/" + h.Metadata.Name
		var target *workload
		for _, w := range m.workloads {
			if w.Kind == h.Spec.ScaleTargetRef.Kind && w.Metadata.Name == h.Spec.ScaleTargetRef.Name {
				target = w
			}
		}
		if target == nil {
			r.fail("%s: targets %s/%s, which is not in the manifests", where, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
			continue
		}
		minR := 1
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		before := r.fails
		if target.Spec.Replicas != nil {
			r.fail("%s: %s sets replicas, which every apply would reset under the autoscaler", where, target.Metadata.Name)
		}
		if minR > h.Spec.MaxReplicas {
			r.fail("%s: minReplicas %d > maxReplicas %d", where, minR, h.Spec.MaxReplicas)
		}
		for _, metric := range h.Spec.Metrics {
			if metric.Resource == nil {
				continue
			}
			for _, c := range target.Spec.Template.Spec.Containers {
				if c.Resources.Requests[metric.Resource.Name] == "" {
					r.fail("%s: scales on %s, but container %s has no %s request to take a utilization of", where, metric.Resource.Name, c.Name, metric.Resource.Name)
				}
			}
		}
		scaled[target.Metadata.Name] = minR
		if r.fails == before {
			r.ok("%s: scales Deployment/%s (%d..%d), which leaves replicas to it", where, target.Metadata.Name, minR, h.Spec.MaxReplicas)
		}
	}
	for _, p := range m.pdbs {
		where := "PodDisruptionBudget/" + p.Metadata.Name
		ws := podsSelected(m, p.Spec.Selector.MatchLabels)
		if len(ws) != 1 {
			r.fail("%s: selects %d Deployments, want exactly one", where, len(ws))
			continue
		}
		w := ws[0]
		replicas, ok := scaled[w.Metadata.Name]
		if !ok {
			replicas = 1
			if w.Spec.Replicas != nil {
				replicas = *w.Spec.Replicas
			}
		}
		if n, isInt := p.Spec.MinAvailable.(int); isInt && n >= replicas {
			r.fail("%s: minAvailable %d with %d replicas blocks every voluntary eviction (node drains hang)", where, n, replicas)
			continue
		}
		if n, isInt := p.Spec.MaxUnavailable.(int); isInt && n < 1 {
			r.fail("%s: maxUnavailable %d blocks every voluntary eviction", where, n)
			continue
		}
		r.ok("%s: covers %s/%s (%d replicas at least) and lets a node drain proceed", where, w.Kind, w.Metadata.Name, replicas)
	}
}
